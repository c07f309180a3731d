"""Graph repairs done at import, before constant folding (see :func:`parapipe.graph.normalize.normalise`).

Each pass fixes one kind of model that exporters and tools produce and that splitting would otherwise get wrong:

* :func:`inline_functions` -- model-local functions (the dynamo exporter and onnxscript emit them) are inlined,
  so their operators are costed and can be placed on different PUs (ONNX's own inliner,
  :func:`onnx.inliner.inline_local_functions`);
* :func:`drop_dead_nodes` -- operators whose outputs nobody reads and that are no graph output are removed, as
  ONNX Runtime does when it loads a model (a stage made only of them would have no output to request);
* :func:`unique_dequantize` -- a ``DequantizeLinear`` read by several operators is copied once per reader, as
  ONNX Runtime's QDQ transformer ``EnsureUniqueDQForNodeUnit`` does, so each (DQ, reader) pair can stay in one
  block and be fused into a quantized kernel there exactly as in the whole model;
* :func:`constant_outputs_as_nodes` -- an initializer listed as a graph output gets an ``Identity`` node, so
  some stage delivers it like every other output;
* :func:`name_nodes` -- every node gets a unique non-empty name (ONNX Runtime refuses duplicate names).

:func:`runnable_reference` applies only the renaming to the user's model: the reference the split model's
outputs are compared with is the model as given, which ONNX Runtime refuses only for duplicate node names.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict

import onnx
from onnx import helper

from parapipe.graph._proto import node_inputs

__all__ = ["QDQ_OPS", "inline_functions", "drop_dead_nodes", "unique_dequantize",
           "constant_outputs_as_nodes", "name_nodes", "runnable_reference"]

logger = logging.getLogger(__name__)

#: ONNX op types that quantize or dequantize; never constant-folded (folding int8/int4 weights to float
#: changes the numbers ONNX Runtime's fused quantized kernels compute, and grows int4 weights 8x).
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def inline_functions(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """``model`` with every call of a model-local function replaced by the function's body (a new model when
    there are functions, else ``model`` itself)."""
    if not model.functions:
        return model
    from onnx import inliner

    inlined = inliner.inline_local_functions(model)
    logger.info("%s: inlined %d model-local function(s)", source, len(model.functions))
    return inlined


def drop_dead_nodes(graph: onnx.GraphProto) -> int:
    """Remove nodes none of whose outputs is read by another node or is a graph output, repeatedly (in place).

    Returns the number of nodes removed.
    """
    removed = 0
    while True:
        used = {name for node in graph.node for name in node_inputs(node)} | {o.name for o in graph.output}
        keep = [n for n in graph.node if any(o and o in used for o in n.output)]
        if len(keep) == len(graph.node):
            return removed
        removed += len(graph.node) - len(keep)
        del graph.node[:]
        graph.node.extend(keep)


def unique_dequantize(graph: onnx.GraphProto) -> int:
    """Give every ``DequantizeLinear`` output a single reading node by copying the DQ node (in place).

    The first reader keeps the original; reader ``k`` >= 1 gets a copy whose output is ``<output>_dq<k>``.
    Readers that capture the tensor inside a subgraph are left on the original. Returns the copies added.
    """
    readers: dict[str, list[int]] = defaultdict(list)
    for idx, node in enumerate(graph.node):
        for name in dict.fromkeys(node.input):
            if name:
                readers[name].append(idx)
    taken = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    nodes = list(graph.node)
    added: list[tuple[int, onnx.NodeProto]] = []
    for node in nodes:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        out = node.output[0]
        for k, reader in enumerate(readers.get(out, [])[1:], start=1):
            name = f"{out}_dq{k}"
            while name in taken:
                name += "_"
            taken.add(name)
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.output[0] = name
            copy.name = f"{node.name}_dq{k}" if node.name else ""
            target = nodes[reader]
            for i, inp in enumerate(target.input):
                if inp == out:
                    target.input[i] = name
            added.append((reader, copy))
    if added:
        before: dict[int, list[onnx.NodeProto]] = defaultdict(list)
        for reader, copy in added:
            before[reader].append(copy)
        ordered = []
        for idx, node in enumerate(nodes):
            ordered.extend(before.get(idx, []))
            ordered.append(node)
        del graph.node[:]
        graph.node.extend(ordered)
    return len(added)


def constant_outputs_as_nodes(graph: onnx.GraphProto) -> list[str]:
    """Make every graph output that is an initializer the output of an ``Identity`` node (in place).

    The initializer is renamed ``<name>_value`` (with ``_`` appended while taken); returns the outputs changed.
    """
    inits = {t.name: t for t in graph.initializer}
    names = {o for n in graph.node for o in n.output} | set(inits) | {i.name for i in graph.input}
    changed = []
    for out in graph.output:
        if out.name not in inits or out.name in changed:
            continue
        value = f"{out.name}_value"
        while value in names:
            value += "_"
        names.add(value)
        inits[out.name].name = value
        for node in graph.node:  # other readers of the constant read the renamed initializer
            for i, inp in enumerate(node.input):
                if inp == out.name:
                    node.input[i] = value
        for vi in graph.input:  # IR < 4: the initializer is also listed as an input
            if vi.name == out.name:
                vi.name = value
        graph.node.insert(0, helper.make_node("Identity", [value], [out.name], name=f"{out.name}_const"))
        changed.append(out.name)
    return changed


def name_nodes(graph: onnx.GraphProto) -> None:
    """Give every node a unique non-empty name (in place).

    Names that are already unique are kept; the others become ``f"{op_type}_{index}"`` (index in
    ``graph.node``) with a numeric suffix on collision.
    """
    counts = Counter(n.name for n in graph.node)
    taken = {name for name, c in counts.items() if name and c == 1}
    for index, node in enumerate(graph.node):
        if node.name and counts[node.name] == 1:
            continue
        base = f"{node.op_type}_{index}"
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        node.name = name


def runnable_reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """The user's model as ONNX Runtime will load it for the reference run: nodes renamed by
    :func:`name_nodes` when two share a name (a copy then; otherwise ``model`` itself)."""
    names = [n.name for n in model.graph.node]
    if all(names) and len(set(names)) == len(names):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    name_nodes(copy.graph)
    return copy
