"""Turn pydantic validation failures into parapipe's one-line :class:`~parapipe.errors.InputError`.

SoC profiles are validated twice: the file layout by :mod:`parapipe.soc.schema` (keys, types, provenance) and
the values by :mod:`parapipe.soc.profile` (ranges, cross-field rules). Both raise pydantic's ``ValidationError``;
:func:`to_input_error` rewrites its first error as ``"<file>: <dotted.field.path>: <problem>; <fix>"`` so users
never see a pydantic dump. Validators that know more than pydantic (which PU, which pair) raise
:class:`FieldProblem`, whose relative field path and fix text are kept.
"""
from __future__ import annotations

import difflib
import typing
from typing import Any, Mapping, Optional, Sequence

from pydantic import BaseModel, ValidationError

from parapipe.errors import InputError, input_error

__all__ = ["NAME_PATTERN", "FIX_HINTS", "FieldProblem", "dotted", "to_input_error"]

#: PU names: usable as ``--pus big,gpu`` and as YAML keys without quoting.
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"

#: The words YAML 1.1 reads as booleans (https://yaml.org/type/bool.html), lower-cased; YAML 1.2 and PyYAML
#: read ``y``/``n`` (and PyYAML's safe loader every word but true/false under parapipe's loader) as strings.
YAML11_BOOLEANS = {"y": True, "yes": True, "true": True, "on": True,
                   "n": False, "no": False, "false": False, "off": False}


def yaml11_boolean_name(value: Any, field: str) -> None:
    """Refuse a name that YAML readers disagree on: an unquoted YAML 1.1 boolean word (``name: no``), or a name
    that loaded as a boolean.

    Parameters
    ----------
    value : object
        The name as loaded: :class:`parapipe.soc.loader.YamlAmbiguous` (a plain scalar YAML 1.1 would read as
        a boolean) carries ``yaml_problem``; a quoted word is a plain ``str`` and passes.
    field : str
        The field, for the fix (``name``, a PU key).

    Raises
    ------
    FieldProblem
        ``"'no' is a YAML 1.1 boolean (false) ..."``, fix ``quote it: name: "no"``.
    """
    if isinstance(value, bool):
        word = "true" if value else "false"
        raise FieldProblem("", f"{word} is a boolean, not a name", f'quote it if it is the name: {field}: "{word}"')
    if isinstance(value, str) and hasattr(value, "yaml_problem") and value.lower() in YAML11_BOOLEANS:
        meant = str(YAML11_BOOLEANS[value.lower()]).lower()
        raise FieldProblem("", f"{str(value)!r} is a YAML 1.1 boolean ({meant}): other YAML readers load it as "
                           f"{meant}, not as a name", f'quote it: {field}: "{value}"')

#: How to fix a bad value, by field name (the last matching component of the error's path wins). Units follow
#: the SI names of the fields; the example values are the orders of magnitude in the bundled profiles.
FIX_HINTS = {
    "memory_bandwidth_bytes_per_s": "give bytes per second, e.g. 1.2e10",
    "beta_bytes_per_s": "give bytes per second, e.g. 5.3e8",
    "peak_flops": "give FLOP/s at the PU's native precision, e.g. 7.04e10",
    "frequency_hz": "give hertz, e.g. 2.2e9",
    "alpha_s": "give seconds, e.g. 1.0e-3",
    "op_overhead_s": "give seconds per operator, e.g. 2.0e-5",
    "active_power_w": "give watts, e.g. 1.5",
    "idle_power_w": "give watts, not more than active_power_w, e.g. 0.1",
    "static_power_w": "give watts, e.g. 2.3",
    "efficiency": "give the achieved fraction of peak_flops in (0, 1], e.g. 0.4",
    "cores": "give a whole number >= 1, e.g. 4",
    "threads": "give a whole number >= 1, e.g. 4",
    "cpus": "give a list of CPU ids, e.g. [2, 3, 4, 5]",
    "kind": "use one of cpu, gpu, npu, dla, dsp",
    "precision": "use one of fp32, fp16, bf16, int8",
    "supported_ops": "write 'all' or a list of ONNX op types, e.g. [Conv, Relu]",
    "provider": "give an ONNX Runtime execution provider name, e.g. CPUExecutionProvider",
    "provider_options": "give a mapping of strings, e.g. {trt_dla_core: '0'}",
    "sources": "map each source key to its full citation, e.g. {khadas_vim3: 'Khadas VIM3 datasheet'}",
    "schema_version": "write schema_version: 1",
    "symmetric": "write true or false",
    "pus": "define the PUs as a mapping name -> PU (see soc_profiles/README.md)",
    "transfers": "give transfers: {default: {alpha_s: ..., beta_bytes_per_s: ...}, pairs: [...]}",
}
_DEFAULT_FIX = "see soc_profiles/README.md for the profile format"


class FieldProblem(ValueError):
    """A validation failure that knows its field path (relative to the validated object) and its fix.

    Raised inside pydantic validators; pydantic wraps it as a ``value_error`` and :func:`to_input_error` unwraps
    it, joining pydantic's location with ``field``.

    Parameters
    ----------
    field : str
        Dotted path relative to the object being validated ("" for the object itself).
    problem : str
        What is wrong, e.g. ``"must be <= active_power_w (1.3), got 2.0"``.
    fix : str
        How to fix it.
    """

    def __init__(self, field: str, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem
        self.fix = fix


def dotted(loc: Sequence[Any]) -> str:
    """Join a pydantic location tuple into a dotted path (``("pus", "gpu", 0)`` → ``"pus.gpu.0"``)."""
    return ".".join(str(part) for part in loc if str(part) != "")


def _hint(loc: Sequence[Any]) -> Optional[str]:
    for part in reversed(list(loc)):
        if isinstance(part, str) and part in FIX_HINTS:
            return FIX_HINTS[part]
    return None


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # "got -1", not "got -1.0"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(annotation: Any) -> Any:
    """``Optional[X]`` → ``X``; anything else unchanged."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return args[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _owner_model(root: Optional[type], loc: Sequence[Any]) -> Optional[type[BaseModel]]:
    """The model class whose fields the last component of ``loc`` is looked up in (None if unknown).

    Walks ``root``'s annotations along ``loc[:-1]``: a model field name enters that field's annotation, a dict
    key / list index enters the container's item type.
    """
    current: Any = root
    for part in loc[:-1]:
        current = _unwrap(current)
        if _is_model(current):
            field = current.model_fields.get(str(part))
            current = field.annotation if field is not None else None
        elif typing.get_origin(current) in (dict, list, tuple, frozenset):
            args = typing.get_args(current)
            current = args[-1] if typing.get_origin(current) is dict else args[0]
        else:
            return None
    current = _unwrap(current)
    return current if _is_model(current) else None


def _describe(error: Mapping[str, Any], root: Optional[type]) -> tuple[list, str, str]:
    """(location, problem, fix) for one pydantic error dict."""
    loc = list(error.get("loc", ()))
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    value = error.get("input")
    hint = _hint(loc)
    if kind == "value_error" and isinstance(ctx.get("error"), FieldProblem):  # a validator that knows more
        problem = ctx["error"]
        extra = [p for p in problem.field.split(".") if p]
        return loc + extra, problem.problem, problem.fix
    yaml_problem = getattr(value, "yaml_problem", "")
    if yaml_problem:  # parapipe.soc.loader.YamlAmbiguous: a YAML 1.1 surprise
        return loc, yaml_problem, getattr(value, "yaml_fix", "")
    got = f"got {type(value).__name__} {_show(value)}"
    if kind == "missing":
        name = str(loc[-1]) if loc else "field"
        return loc, "missing field", f"add '{name}'" + (f": {hint}" if hint else "")
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        model = _owner_model(root, loc)
        if model is None:
            return loc, f"unknown key '{name}'", "remove it or check its spelling; " + _DEFAULT_FIX
        allowed = list(model.model_fields)
        close = difflib.get_close_matches(name, allowed, n=1)
        guess = f"did you mean '{close[0]}'? " if close else ""
        return loc, f"unknown key '{name}'", f"{guess}allowed keys here: {', '.join(allowed)}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        sign = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = ctx.get({">": "gt", ">=": "ge", "<": "lt", "<=": "le"}[sign])
        return loc, f"must be {sign} {_show(bound)}, got {_show(value)}", hint or _DEFAULT_FIX
    if kind == "finite_number":
        return loc, f"must be a finite number, {got}", hint or _DEFAULT_FIX
    if kind == "model_type" and ctx.get("class_name") == "Quantity":
        return (loc, f"expected a quantity with provenance, {got}",
                f"write {{value: {_show(value)}, source: KEY}} with KEY from the top-level sources:, "
                "or {value: ..., confidence: low, note: \"why this estimate\"}")
    if kind == "string_pattern_mismatch":
        return loc, f"{_show(value)} is not a valid name", "use letters, digits and '_' and start with a letter"
    expected = {"float": "a number", "int": "a whole number", "string": "a string", "bool": "true or false",
                "dict": "a mapping", "model": "a mapping", "list": "a list", "tuple": "a list",
                "frozen_set": "a list", "set": "a list"}
    for prefix, words in expected.items():
        if kind.startswith(prefix + "_") or kind == prefix:
            return loc, f"wrong type: expected {words}, {got}", hint or _DEFAULT_FIX
    if kind == "literal_error":
        return loc, f"must be one of {ctx.get('expected')}, got {_show(value)}", hint or _DEFAULT_FIX
    message = error.get("msg", "invalid value")
    return loc, message[len("Value error, "):] if message.startswith("Value error, ") else message, \
        hint or _DEFAULT_FIX


def to_input_error(err: ValidationError, source: Optional[str], root: Optional[type] = None,
                   prefix: Sequence[Any] = (), default_fix: Optional[str] = None) -> InputError:
    """Rewrite the first error of a pydantic ``ValidationError`` as a one-line :class:`InputError`.

    Parameters
    ----------
    err : pydantic.ValidationError
        The failure; only its first error is reported.
    source : str or None
        The file (or other origin, e.g. ``"SoC 'host'"``) the values came from.
    root : type, optional
        The pydantic model class that was validated; used to list the allowed keys for an unknown key.
    prefix : sequence
        Location components to put in front of pydantic's (when a nested object was validated alone).
    default_fix : str, optional
        The fix for errors without a field-specific hint (default: see the SoC profile format).

    Returns
    -------
    InputError
        ``"<source>: <dotted field path>: <problem>; <fix>"``; not raised.
    """
    errors = err.errors()
    if not errors:  # pragma: no cover - pydantic never raises an empty ValidationError
        return input_error(source, None, "invalid value", _DEFAULT_FIX)
    loc, problem, fix = _describe(errors[0], root)
    if default_fix is not None and _DEFAULT_FIX in fix:
        fix = fix.replace(_DEFAULT_FIX, default_fix)
    return input_error(source, dotted(list(prefix) + loc) or None, problem, fix)
