"""Read and write SoC profile YAML files (format: soc_profiles/README.md).

Loading runs three checks, each reported as one ``InputError`` line ``"<file>: <field.path>: <problem>; <fix>"``:
YAML syntax (with line and column; a duplicate key names both lines and its field path; merge keys ``<<:``
load), the file layout and provenance (:mod:`parapipe.soc.schema`), then the values
(:mod:`parapipe.soc.profile`). Scalars are read as YAML 1.2 does: integers are plain decimal digits and
booleans ``true``/``false``; what YAML 1.1 would silently turn into other numbers or booleans (``cores: 010``
= 8, ``threads: 1:30`` = 90, ``symmetric: yes``) is refused naming the field (:class:`YamlAmbiguous`), and so is
a YAML 1.1 boolean word as a name (``name: no``; quoted, ``name: "no"``, it loads).
"""
from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from pydantic import ValidationError

from parapipe._paths import data_dir
from parapipe.errors import input_error
from parapipe.soc.catalog import list_socs
from parapipe.soc.op_classes import OP_CLASSES
from parapipe.soc.profile import SoC
from parapipe.soc.schema import SCHEMA_VERSION, SocFile
from parapipe.soc.validation import to_input_error

__all__ = ["GENERATED_SOURCE", "GENERATED_CITATION", "YamlAmbiguous", "read_yaml", "soc_from_yaml_dict",
           "soc_to_yaml_dict", "save_soc", "list_socs", "load_soc"]

logger = logging.getLogger(__name__)

#: Source key written by :func:`soc_to_yaml_dict` for numbers without recorded provenance.
GENERATED_SOURCE = "generated"
GENERATED_CITATION = ("Written by parapipe (soc_to_yaml_dict) from values given in Python, e.g. measured on the "
                      "host; no further citation.")


class YamlAmbiguous(str):
    """A plain scalar YAML 1.1 reads as a number or boolean that the file's author rarely means (``010`` = 8,
    ``1:30`` = 90, ``on`` = true). Kept as its text: a string field takes it as written (YAML 1.2), a number or
    boolean field reports :attr:`yaml_problem` and :attr:`yaml_fix` (see :mod:`parapipe.soc.validation`)."""

    yaml_problem: str = ""
    yaml_fix: str = ""


def _ambiguous(text: str) -> YamlAmbiguous:
    value = YamlAmbiguous(text)
    plain = text.replace("_", "")
    if text.lower() in ("yes", "no", "on", "off", "y", "n"):
        meant = "true" if text.lower() in ("yes", "on", "y") else "false"
        value.yaml_problem = f"{text!r} is not true or false (YAML 1.1 would read it as {meant})"
        value.yaml_fix = "write true or false"
    elif ":" in text:
        value.yaml_problem = f"{text!r} is not a plain decimal number (YAML 1.1 reads it in base 60)"
        value.yaml_fix = "write the number in decimal digits"
    elif re.fullmatch(r"[-+]?0[0-7]+", plain):
        value.yaml_problem = f"{text!r} has a leading zero (YAML 1.1 reads it as octal {int(plain, 8)})"
        value.yaml_fix = f"write {int(plain)} without the leading zero"
    else:
        value.yaml_problem = f"{text!r} is not a plain decimal integer"
        value.yaml_fix = "write the number in decimal digits without '_', '0x', '0o' or '0b'"
    return value


class _Loader(yaml.SafeLoader):
    """Safe YAML loader with YAML 1.2 scalars: ``1e10`` is a float; integers are plain decimal digits; booleans
    are ``true``/``false``. YAML 1.1's other readings (octal ``010``, base-60 ``1:30``, ``0x1F``, ``1_000``,
    ``yes``/``no``/``on``/``off``/``y``/``n``) load as :class:`YamlAmbiguous` text."""


_AMBIGUOUS_TAG = "tag:parapipe,2024:yaml11-ambiguous"
# PyYAML follows YAML 1.1, where 1e10 (no dot, unsigned exponent) is a string; accept it as a float. Its int
# and bool readings are replaced by YAML 1.2's; the YAML 1.1 extras are marked ambiguous.
_Loader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:int",
                                                  "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"),
                              list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))
_Loader.add_implicit_resolver(
    _AMBIGUOUS_TAG,
    re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?0o[0-7_]+|[-+]?0x[0-9a-fA-F_]+
                |[-+]?[0-9][0-9_]*_[0-9_]*|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?
                |yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$""", re.X),
    list("-+0123456789yYnNoO"))
_Loader.add_constructor(_AMBIGUOUS_TAG, lambda loader, node: _ambiguous(loader.construct_scalar(node)))


class _Dumper(yaml.SafeDumper):
    """Safe YAML dumper that quotes ``y``/``n`` as well (YAML 1.1 booleans PyYAML writes bare), so a name
    ``"y"`` is written as a string that :class:`_Loader` (and every YAML 1.1 reader) loads back as one."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


def _check_duplicate_keys(node: yaml.Node, display: str, path: tuple = (), seen: Optional[set] = None) -> None:
    """Raise on a mapping key given twice (merge keys ``<<`` excepted), naming both lines and the field path."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and key.tag != "tag:yaml.org,2002:merge":
                if name in lines:
                    field = ".".join(map(str, path + (name,)))
                    raise input_error(display, field, f"duplicate key {name!r} (lines {lines[name]} and "
                                      f"{key.start_mark.line + 1})", "keep one of them")
                lines[name] = key.start_mark.line + 1
            _check_duplicate_keys(value, display, path + ((name,) if name is not None else ()), seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(item, display, path + (i,), seen)


# The same rules on libyaml's parser where PyYAML was built with it (5-10x faster than the pure-Python one on
# a profile: `python -m cProfile -m parapipe optimize alexnet --soc jetson_orin_nano --no-plot`).
_FastLoader: type = _Loader
if hasattr(yaml, "CSafeLoader"):
    class _CLoader(yaml.CSafeLoader):
        """:class:`_Loader` on libyaml's parser."""

    _CLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
    _CLoader.yaml_constructors = _Loader.yaml_constructors
    _FastLoader = _CLoader


def read_yaml(path: Path, display: str) -> Any:
    """Parse a YAML file with the profile loader's rules.

    Raises
    ------
    InputError
        ``"<display>: cannot read ..."``, ``"<display>: line L, column C: invalid YAML (...)"`` or
        ``"<display>: <field.path>: duplicate key 'k' (lines A and B)..."``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise input_error(display, None, f"cannot read the file ({reason})",
                          "check the path and that the file is readable UTF-8 text") from None
    try:
        loader = _FastLoader(text)  # a SafeLoader: safe constructors only
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_duplicate_keys(node, display)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise input_error(display, where, f"invalid YAML ({problem})", "fix the YAML syntax there") from None


def soc_from_yaml_dict(raw: Any, source: str = "<dict>", path: Optional[Path] = None) -> SoC:
    """Validate a parsed profile (the YAML file's top-level mapping) and build the :class:`SoC`.

    Parameters
    ----------
    raw : object
        Parsed YAML; must be a mapping in the format of soc_profiles/README.md.
    source : str
        Name used in error messages (the file as the user gave it).
    path : Path, optional
        Stored as :attr:`SoC.path`.

    Raises
    ------
    InputError
        For any problem, naming ``source`` and the dotted field path.
    """
    if not isinstance(raw, dict):
        raise input_error(source, None, f"expected a mapping at the top level, got {type(raw).__name__}",
                          "start from a bundled profile in soc_profiles/ (see soc_profiles/README.md)")
    version = raw.get("schema_version")
    if version is not None and version != SCHEMA_VERSION:
        raise input_error(source, "schema_version", f"unsupported version {version!r}",
                          f"this parapipe reads schema_version: {SCHEMA_VERSION}")
    sources = raw.get("sources")
    try:
        parsed = SocFile.model_validate(raw, context={"sources": sources if isinstance(sources, dict) else {}})
    except ValidationError as err:
        raise to_input_error(err, source, SocFile) from None
    plain, provenance = _plain_values(parsed)
    try:
        soc = SoC.model_validate({**plain, "provenance": provenance, "path": path})
    except ValidationError as err:
        raise to_input_error(err, source, SoC) from None
    logger.debug("loaded SoC profile %s (%d PUs) from %s", soc.name, len(soc.pus), source)
    return soc


def _plain_values(parsed: SocFile) -> tuple[dict, dict[str, dict]]:
    """The file's numbers without their provenance, and the provenance by dotted field path."""
    provenance: dict[str, dict] = {}

    def number(field: str, quantity) -> float:
        provenance[field] = quantity.provenance()
        return quantity.value

    pus = {}
    for name, entry in parsed.pus.items():
        at = f"pus.{name}"
        efficiency = {k: number(f"{at}.efficiency.{k}", q) for k, q in entry.efficiency.items()}
        if "other" in efficiency:  # classes left out take `other`'s value, and its provenance
            for cls in OP_CLASSES:
                provenance.setdefault(f"{at}.efficiency.{cls}", provenance[f"{at}.efficiency.other"])
        pus[name] = {
            "name": name, "kind": entry.kind, "cores": entry.cores, "precision": entry.precision,
            **{f: number(f"{at}.{f}", getattr(entry, f)) for f in (
                "frequency_hz", "peak_flops", "memory_bandwidth_bytes_per_s", "op_overhead_s",
                "active_power_w", "idle_power_w")},
            "efficiency": efficiency,
            "supported_ops": None if entry.supported_ops == "all" else frozenset(entry.supported_ops),
            "execution": entry.execution.model_dump(exclude_none=True),
        }
        if entry.memory_bytes is not None:
            pus[name]["memory_bytes"] = number(f"{at}.memory_bytes", entry.memory_bytes)
        if entry.operating_points is not None:
            table = entry.operating_points
            provenance[f"{at}.operating_points"] = table.provenance()
            pus[name]["operating_points"] = {
                "frequency_hz": tuple(table.frequency_hz),
                **{f: tuple(getattr(table, f)) for f in ("voltage_v", "active_power_w") if getattr(table, f)},
                "transition_s": number(f"{at}.operating_points.transition_s", table.transition_s),
                **({"memory_bound_fraction": number(f"{at}.operating_points.memory_bound_fraction",
                                                    table.memory_bound_fraction)}
                   if table.memory_bound_fraction is not None else {})}
    default = parsed.transfers.default
    pairs = []
    for i, pair in enumerate(parsed.transfers.pairs):
        at = f"transfers.pairs.{i}"
        pairs.append({"src": pair.src, "dst": pair.dst, "symmetric": pair.symmetric,
                      "alpha_s": number(f"{at}.alpha_s", pair.alpha_s),
                      "beta_bytes_per_s": number(f"{at}.beta_bytes_per_s", pair.beta_bytes_per_s)})
    plain = {
        "name": parsed.name, "description": parsed.description, "sources": parsed.sources,
        "static_power_w": number("static_power_w", parsed.static_power_w),
        "memory_bandwidth_bytes_per_s": number("memory_bandwidth_bytes_per_s", parsed.memory_bandwidth_bytes_per_s),
        "pus": pus,
        "transfers": {"default": {"alpha_s": number("transfers.default.alpha_s", default.alpha_s),
                                  "beta_bytes_per_s": number("transfers.default.beta_bytes_per_s",
                                                             default.beta_bytes_per_s)},
                      "pairs": pairs},
    }
    if parsed.pipeline is not None:
        pipe = parsed.pipeline
        plain["pipeline"] = {
            "overlap": {pu: number(f"pipeline.overlap.{pu}", q) for pu, q in pipe.overlap.items()},
            **({"invoke_s": {pu: number(f"pipeline.invoke_s.{pu}", q) for pu, q in pipe.invoke_s.items()}}
               if pipe.invoke_s else {}),
            **{f: number(f"pipeline.{f}", getattr(pipe, f)) for f in _PIPELINE_SCALARS
               if getattr(pipe, f) is not None}}
    if parsed.power_sensor is not None:
        plain["power_sensor"] = parsed.power_sensor.model_dump(exclude_none=True)
    return plain, provenance


#: The scalar fields of a profile's ``pipeline:`` section (:class:`parapipe.soc.pipeline.PipelineParams`).
_PIPELINE_SCALARS = ("dispatch_s", "handoff_s", "contention", "slowdown", "sharing")


def soc_to_yaml_dict(soc: SoC) -> dict:
    """The profile as a YAML-ready dict in the file format (soc_profiles/README.md).

    Every number is written as ``{value: ..., source: ...}`` with its recorded provenance, or with
    ``source: generated`` (added to ``sources:``) where none was recorded. Loading the result with
    :func:`soc_from_yaml_dict` gives an equal SoC (apart from :attr:`SoC.path`).
    """
    sources = dict(soc.sources)

    def quantity(field: str, value: float) -> dict:
        prov = soc.provenance.get(field)
        if prov is None:
            sources.setdefault(GENERATED_SOURCE, GENERATED_CITATION)
            return {"value": value, "source": GENERATED_SOURCE}
        return {"value": value, **prov.model_dump(exclude_none=True)}

    pus = {}
    for name, pu in soc.pus.items():
        at = f"pus.{name}"
        execution: dict[str, Any] = {}
        if pu.execution.cpus is not None:
            execution["cpus"] = list(pu.execution.cpus)
        execution["threads"] = pu.execution.threads
        if pu.execution.runtime != "onnxruntime" or pu.execution.runtime_options:
            execution.update(runtime=pu.execution.runtime, runtime_options=dict(pu.execution.runtime_options))
        execution.update(provider=pu.execution.provider, provider_options=dict(pu.execution.provider_options))
        if pu.execution.devfreq is not None:
            execution["devfreq"] = pu.execution.devfreq
        pus[name] = {
            "kind": pu.kind, "cores": pu.cores,
            "frequency_hz": quantity(f"{at}.frequency_hz", pu.frequency_hz),
            "peak_flops": quantity(f"{at}.peak_flops", pu.peak_flops),
            "precision": pu.precision,
            "memory_bandwidth_bytes_per_s": quantity(f"{at}.memory_bandwidth_bytes_per_s",
                                                     pu.memory_bandwidth_bytes_per_s),
            "efficiency": {k: quantity(f"{at}.efficiency.{k}", v) for k, v in pu.efficiency.items()},
            "op_overhead_s": quantity(f"{at}.op_overhead_s", pu.op_overhead_s),
            "active_power_w": quantity(f"{at}.active_power_w", pu.active_power_w),
            "idle_power_w": quantity(f"{at}.idle_power_w", pu.idle_power_w),
            "supported_ops": "all" if pu.supported_ops is None else sorted(pu.supported_ops),
            "execution": execution,
        }
        if pu.memory_bytes is not None:
            pus[name]["memory_bytes"] = quantity(f"{at}.memory_bytes", pu.memory_bytes)
        if pu.operating_points is not None:
            ops = pu.operating_points
            prov = soc.provenance.get(f"{at}.operating_points")
            if prov is None:
                sources.setdefault(GENERATED_SOURCE, GENERATED_CITATION)
            pus[name]["operating_points"] = {
                "frequency_hz": list(ops.frequency_hz),
                **{f: list(getattr(ops, f)) for f in ("voltage_v", "active_power_w") if getattr(ops, f) is not None},
                "transition_s": quantity(f"{at}.operating_points.transition_s", ops.transition_s),
                **({"memory_bound_fraction": quantity(f"{at}.operating_points.memory_bound_fraction",
                                                      ops.memory_bound_fraction)}
                   if ops.memory_bound_fraction is not None else {}),
                **(prov.model_dump(exclude_none=True) if prov is not None else {"source": GENERATED_SOURCE})}
    default = soc.transfers.default
    transfers = {
        "default": {"alpha_s": quantity("transfers.default.alpha_s", default.alpha_s),
                    "beta_bytes_per_s": quantity("transfers.default.beta_bytes_per_s", default.beta_bytes_per_s)},
        "pairs": [{"src": p.src, "dst": p.dst, "symmetric": p.symmetric,
                   "alpha_s": quantity(f"transfers.pairs.{i}.alpha_s", p.alpha_s),
                   "beta_bytes_per_s": quantity(f"transfers.pairs.{i}.beta_bytes_per_s", p.beta_bytes_per_s)}
                  for i, p in enumerate(soc.transfers.pairs)],
    }
    head = {"schema_version": SCHEMA_VERSION, "name": soc.name, "description": soc.description}
    body = {
        "static_power_w": quantity("static_power_w", soc.static_power_w),
        "memory_bandwidth_bytes_per_s": quantity("memory_bandwidth_bytes_per_s", soc.memory_bandwidth_bytes_per_s),
        "pus": pus, "transfers": transfers,
    }
    if soc.pipeline is not None:
        pipe = soc.pipeline
        body["pipeline"] = {"overlap": {pu: quantity(f"pipeline.overlap.{pu}", v) for pu, v in pipe.overlap.items()},
                            **({"invoke_s": {pu: quantity(f"pipeline.invoke_s.{pu}", v)
                                             for pu, v in pipe.invoke_s.items()}} if pipe.invoke_s else {}),
                            **{f: quantity(f"pipeline.{f}", getattr(pipe, f)) for f in _PIPELINE_SCALARS
                               if f"pipeline.{f}" in soc.provenance
                               or getattr(pipe, f) != type(pipe).model_fields[f].default}}
    if soc.power_sensor is not None:
        sensor = soc.power_sensor
        body["power_sensor"] = {"kind": sensor.kind, "paths": list(sensor.paths), "rails": list(sensor.rails),
                                "command": list(sensor.command), "interval_s": sensor.interval_s,
                                **({"max_power_w": sensor.max_power_w} if sensor.max_power_w is not None else {})}
    return {**head, "sources": sources, **body}  # `sources` gained `generated` while body was built


def save_soc(soc: SoC, path: Union[str, os.PathLike]) -> Path:
    """Write ``soc`` as a profile YAML file (temporary file, then ``os.replace``); returns the path."""
    target = Path(path)
    text = yaml.dump(soc_to_yaml_dict(soc), Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_soc(spec: Union[str, os.PathLike]) -> SoC:
    """Load a SoC profile.

    Parameters
    ----------
    spec : str or path
        A bundled profile name (see :func:`list_socs`, e.g. ``"amlogic_a311d"``) or a path to a YAML file
        (anything with a ``.yaml``/``.yml`` suffix or a directory separator). The name ``host`` (a profile
        measured on this machine) is handled by the caller, not here.

    Returns
    -------
    SoC
        With :attr:`SoC.path` set to the file.

    Raises
    ------
    InputError
        Unknown profile name (the message lists the bundled ones), unreadable file, invalid YAML (with line
        number), or an invalid profile (naming the file and the dotted field path).
    """
    text = os.fspath(spec)
    if text.endswith((".yaml", ".yml")) or "/" in text or os.sep in text:
        path, display = Path(text), text
    else:
        path = data_dir("soc_profiles") / f"{text}.yaml"
        display = f"soc_profiles/{text}.yaml"
        if not text or not path.is_file():
            raise input_error(None, None, f"unknown SoC profile '{text}'",
                              f"choose from {', '.join(list_socs())}"
                              + (", 'host' (this machine's cores)" if text != "host" else "")
                              + " or give a path to a .yaml file")
    if path.is_dir():
        raise input_error(display, None, "is a directory, not a profile file", "give the path of a .yaml file")
    return soc_from_yaml_dict(read_yaml(path, display), display, path.resolve())
