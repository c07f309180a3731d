"""Can anything run this model? Operator domains, the installed ONNX Runtime, and the PUs of a profile.

* :func:`qualified_op_type` -- op types outside the ONNX domain carry their domain (``com.microsoft.FusedMatMul``,
  ``com.example.MyOp``): that is how operators, blocks and a PU's ``supported_ops`` name them.
* :func:`check_runtime` -- the installed ONNX Runtime must be able to load every operator of the standard
  domains at the model's opset (one CPU session on the weight-free skeleton, optimisation off). An opset beyond
  what it supports, or an operator version it does not implement, is refused with one line naming the operator
  and its domain.
* :func:`check_declared` -- an operator of a custom domain (not ONNX, ONNX-ML or ONNX Runtime's
  ``com.microsoft``) runs only on a PU whose ``supported_ops`` lists it by its qualified name; with none, the
  model is refused with one line naming the operator and its domain.
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Iterable, Optional

from parapipe.errors import input_error

if TYPE_CHECKING:  # the functions only read the protobuf fields: importing onnx (and ml_dtypes) waits for a model
    import onnx

__all__ = ["STANDARD_DOMAINS", "qualified_op_type", "split_op_type", "is_custom", "custom_nodes",
           "check_runtime", "check_declared"]

logger = logging.getLogger(__name__)

#: Domains whose operators ONNX Runtime's CPU provider implements (ONNX, ONNX-ML, ORT's contrib ops): a PU with
#: ``supported_ops: all`` runs them. Operators of any other domain must be listed by the PU.
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})

_NOT_IMPLEMENTED = re.compile(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'")
_UNREGISTERED = re.compile(r"([\w.]*):(\w+)\((-?\d+)\) is not a registered function/op")
_OPSET = re.compile(r"Opset (\d+) is under development|only \*guarantees\* support for models stamped with "
                    r"official released onnx opset versions\. Opset (\d+)")


def qualified_op_type(node: onnx.NodeProto) -> str:
    """``op_type`` for the ONNX domain, else ``"<domain>.<op_type>"``."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def split_op_type(qualified: str) -> tuple[str, str]:
    """``"com.example.MyOp"`` -> ``("com.example", "MyOp")``; ``"Conv"`` -> ``("", "Conv")``."""
    domain, _, op = qualified.rpartition(".")
    return domain, op


def is_custom(qualified: str) -> bool:
    """True for an op type of a domain outside :data:`STANDARD_DOMAINS`."""
    return split_op_type(qualified)[0] not in STANDARD_DOMAINS


def custom_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes of ``model``'s main graph whose domain is not one of :data:`STANDARD_DOMAINS`."""
    return [n for n in model.graph.node if n.domain not in STANDARD_DOMAINS]


def check_runtime(model: onnx.ModelProto, source: str) -> None:
    """Refuse a model whose standard-domain operators the installed ONNX Runtime cannot load.

    Builds one CPU session of the model's skeleton (weights replaced by typed inputs, node names made unique)
    with graph optimisation off. Models with custom-domain operators are checked only by
    :func:`check_declared` (ONNX Runtime cannot load those at all); other load failures are left to the steps
    that meet them (logged here).

    Raises
    ------
    InputError
        ``"<source>: operator OP (domain D, node N): onnxruntime V does not implement it at opset K; ..."`` for
        an opset or operator version the runtime lacks.
    """
    if custom_nodes(model):
        return
    import onnxruntime as ort

    from parapipe.graph.cleanup import runnable_reference
    from parapipe.graph.shapes import skeleton

    probe = skeleton(runnable_reference(model))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT's Fail / InvalidGraph / NotImplemented
        text = " ".join(str(exc).split())
        _refuse_if_unsupported(model, source, text, ort.__version__)
        logger.info("%s: ONNX Runtime cannot load the model as given (%s); going on", source, text[:300])


def _refuse_if_unsupported(model: onnx.ModelProto, source: str, text: str, version: str) -> None:
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    match = _NOT_IMPLEMENTED.search(text)
    if match:
        op, op_version, node = match.groups()
        domain = next((n.domain or "ai.onnx" for n in model.graph.node if n.name == node), "ai.onnx")
        raise input_error(source, f"operator {op} (domain {domain}, node {node!r})",
                          f"onnxruntime {version} does not implement version {op_version} of it "
                          f"(model opset {opsets.get(domain, '?')})",
                          "export the model with an opset this onnxruntime supports, or upgrade onnxruntime")
    match = _OPSET.search(text)
    if match:
        opset = int(match.group(1) or match.group(2))
        domain = next((d for d, v in opsets.items() if v == opset), "ai.onnx")
        node = next((n for n in model.graph.node if (n.domain or "ai.onnx") == domain), None)
        op = f"operator {node.op_type} (domain {domain}, node {node.name!r})" if node is not None \
            else f"opset_import {domain}"
        raise input_error(source, op, f"the model imports opset {opset} of domain {domain}, which onnxruntime "
                          f"{version} does not support",
                          "export the model with a lower opset (onnx.version_converter), or upgrade onnxruntime")
    match = _UNREGISTERED.search(text)
    if match:
        domain, op, _ = match.groups()
        raise input_error(source, f"operator {op} (domain {domain or 'ai.onnx'})",
                          f"onnxruntime {version} has no such operator", "export the model without it")


def check_declared(model: onnx.ModelProto, source: str, soc_name: str,
                   supported: Optional[Iterable[Optional[frozenset]]]) -> None:
    """Refuse a model with a custom-domain operator that no PU of the profile declares.

    Parameters
    ----------
    model : onnx.ModelProto
        The normalised model.
    source : str
        File or model name for the message.
    soc_name : str
        Profile name for the message.
    supported : iterable of (frozenset of str or None)
        Each PU's ``supported_ops`` (None = all standard-domain operators, no custom ones).

    Raises
    ------
    InputError
        ``"<source>: operator OP (domain D, node N): no PU of SOC declares it; ..."``.
    """
    sets = [s for s in (supported or ()) if s is not None]
    for node in custom_nodes(model):
        name = qualified_op_type(node)
        if not any(name in s for s in sets):
            fix = (f"add '{name}' to the supported_ops of a PU that runs it, or export the model without it"
                   if supported else "export the model without it: this profile's PUs run ONNX Runtime's "
                   "operators only")
            raise input_error(source, f"operator {node.op_type} (domain {node.domain}, node {node.name!r})",
                              f"is a custom-domain operator that no PU of {soc_name} declares, so nothing can "
                              "run it", fix)
