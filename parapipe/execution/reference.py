"""The unsplit model as the reference of a run: a copy that also outputs the tensors handed between tasks.

Comparing outputs is the executor's job (:mod:`ppexec.reference`); building the reference model needs onnx,
so it happens here, on the computer that builds the plan.
"""
from __future__ import annotations

from typing import Sequence

import onnx

__all__ = ["reference_with_outputs"]


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
