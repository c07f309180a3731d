"""The unsplit model as the reference of a run: a copy that also outputs the tensors handed between tasks.

Comparing outputs is the executor's job (:mod:`ppexec.reference`); building the reference model needs onnx,
so it happens here, on the computer that builds the plan.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import onnx

__all__ = ["reference_with_outputs", "softmax_inputs", "reference_for_check"]

#: Operators whose model output is checked through their input (:func:`ppexec.reference.softmax_bound`).
_SOFTMAX_OPS = ("Softmax", "LogSoftmax")


def reference_with_outputs(model: onnx.ModelProto, og, names: Sequence[str]) -> tuple:
    """A copy of the unsplit ``model`` that also outputs the activation tensors ``names``.

    Parameters
    ----------
    model : onnx.ModelProto
        The model as loaded (e.g. ``LoadedModel.model``).
    og : parapipe.graph.opgraph.OpGraph
        Its operator graph (shapes and dtypes of the tensors).
    names : sequence of str
        Tensors to expose, e.g. :func:`handed_over_tensors` of a plan.

    Returns
    -------
    (onnx.ModelProto, list of str)
        The model (nodes renamed when two share a name, which ONNX Runtime refuses:
        :func:`parapipe.graph.cleanup.runnable_reference`), and the names it really exposes: those produced by
        one of its nodes (a tensor folded away when the graph was normalised has no producer and is left out).
    """
    from parapipe.graph.cleanup import runnable_reference

    produced = {o for node in model.graph.node for o in node.output}
    already = {o.name for o in model.graph.output}
    copy = onnx.ModelProto()
    copy.CopyFrom(runnable_reference(model))
    kept = []
    for name in names:
        if name not in produced or name in already or name not in og.tensors:
            continue
        copy.graph.output.append(og.value_info(name))
        kept.append(name)
    return copy, kept


def softmax_inputs(model: onnx.ModelProto) -> Dict[str, Tuple[str, str]]:
    """Graph output -> (the input tensor of the Softmax or LogSoftmax node producing it, its op type), for the
    outputs ``model`` computes with such a node (default ONNX domain)."""
    outputs = {o.name for o in model.graph.output}
    found: Dict[str, Tuple[str, str]] = {}
    for node in model.graph.node:
        if node.op_type in _SOFTMAX_OPS and node.domain in ("", "ai.onnx") and node.output \
                and node.output[0] in outputs and node.input and node.input[0]:
            found[node.output[0]] = (node.input[0], node.op_type)
    return found


def reference_for_check(model: onnx.ModelProto, og, handed: Sequence[str]) -> Tuple[onnx.ModelProto, List[str],
                                                                                    Dict[str, Tuple[str, str]]]:
    """The reference a verified run compares with (``ppexec.bundle_run.RunSpec``): the unsplit model that also
    outputs the ``handed`` tensors and the inputs of its Softmax/LogSoftmax outputs (:func:`softmax_inputs`).

    Returns
    -------
    (onnx.ModelProto, list of str, dict of str to (str, str))
        The model, the handed tensors it exposes (``check_tensors``), and the softmax outputs whose inputs it
        exposes (``softmax_inputs``).
    """
    softmax = softmax_inputs(model)
    extra = [src for src, _ in softmax.values() if src not in handed]
    reference, kept = reference_with_outputs(model, og, list(handed) + extra)
    exposed = set(kept) | {o.name for o in model.graph.output}
    checked = [name for name in kept if name in set(handed)]
    return reference, checked, {out: src for out, src in softmax.items() if src[0] in exposed}
