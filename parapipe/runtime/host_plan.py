"""From a ``pareto.json`` point computed with ``--soc host`` to an execution plan for a matching machine.

Host PUs are the cores ``cpu0``, ``cpu1``, ... (:mod:`parapipe.profiling.host`); each becomes a
:class:`~parapipe.runtime.plan.PUBinding` pinned to that core with one ORT thread, exactly as the profile
measured the blocks. Used by ``parapipe deploy`` (the plan runs on the SSH host) and the executor benchmark.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence

from parapipe.errors import input_error
from parapipe.runtime.plan import ExecutionPlan, PUBinding, StageSpec, build_plan

logger = logging.getLogger(__name__)

#: SoC name of mappings computed for this kind of machine (``parapipe optimize MODEL --soc host``).
HOST_SOC = "host"
_HOST_PU = re.compile(r"^cpu([0-9]+)$")


@dataclass
class HostMapping:
    """One point of a host mapping, with the model it belongs to and its execution plan.

    Attributes
    ----------
    loaded : parapipe.graph.zoo.LoadedModel
    opgraph : parapipe.graph.opgraph.OpGraph
    block_graph : parapipe.graph.coarsen.BlockGraph
        Coarsened as the mapping was (``search.max_blocks`` of the document).
    doc : dict
        The pareto.json document.
    point : dict
        The selected point.
    stages : list of StageSpec
    plan : ExecutionPlan
    """

    loaded: Any
    opgraph: Any
    block_graph: Any
    doc: Dict[str, Any]
    point: Dict[str, Any]
    stages: List[StageSpec]
    plan: ExecutionPlan

    @property
    def predicted_throughput_per_s(self) -> float:
        """``1 / period_s`` of the point (the cost model's throughput)."""
        return 1.0 / float(self.point["period_s"])

    @property
    def predicted_latency_s(self) -> float:
        """The point's modelled latency, s."""
        return float(self.point["latency_s"])


def host_bindings(pus: Iterable[str], source: str = "mapping") -> Dict[str, PUBinding]:
    """One binding per host PU ``cpu<i>``: pinned to CPU ``i``, one ORT thread, the CPU provider.

    Raises
    ------
    InputError
        A PU that is not ``cpu<i>``.
    """
    bindings = {}
    for pu in pus:
        match = _HOST_PU.match(pu)
        if not match:
            raise input_error(source, "points.mapping.stages.pus", f"unknown host PU {pu!r}",
                              "host PUs are cpu0, cpu1, …: compute the mapping with --soc host")
        bindings[pu] = PUBinding(cpus=(int(match[1]),), threads=1)
    return bindings


def stage_specs(point: Dict[str, Any]) -> List[StageSpec]:
    """The point's stages as :class:`StageSpec` (``pus``, ``assignment``, ``order`` of each stage)."""
    return [StageSpec(pus=list(st["pus"]), assignment=dict(st["assignment"]), order=list(st["order"]))
            for st in point["mapping"]["stages"]]


def load_host_mapping(model: str, mapping_path: str, point: str,
                      input_shapes: Optional[Dict[str, Sequence[int]]] = None) -> HostMapping:
    """Load ``model``, read the mapping, select ``point`` and build its execution plan.

    Parameters
    ----------
    model : str
        Registry name or .onnx path (the model the mapping was computed for).
    mapping_path : str
        pareto.json written by ``parapipe optimize MODEL --soc host``.
    point : str
        Point id or ``best-throughput`` | ``best-latency`` | ``best-energy``.
    input_shapes : dict of str to sequence of int, optional
        ``--input-shape`` values; they must equal the shapes stored in the mapping (``input_shapes``), which
        are used when none are given.

    Raises
    ------
    InputError
        Unreadable mapping, a mapping for another model (sha256) or SoC, input shapes other than those the
        mapping was computed for, an unknown point, block names that do not match the model, a PU that is not
        a host core.
    """
    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model
    from parapipe.mapping_doc import load_doc, select_point

    doc = load_doc(mapping_path)
    lm = load_model(model)
    if doc["model"]["sha256"] != lm.sha256:
        raise input_error(mapping_path, "model.sha256",
                          f"mapping was computed for model {doc['model'].get('name')!r} "
                          f"(sha256 {doc['model']['sha256'][:12]}…), not {lm.name!r} ({lm.sha256[:12]}…)",
                          "run 'parapipe optimize' on this model first")
    if doc["soc"] != HOST_SOC:
        raise input_error(mapping_path, "soc", f"mapping was computed for SoC {doc['soc']!r}, not for a "
                          "machine like the one it runs on",
                          "compute the mapping on a matching machine with "
                          "'parapipe optimize MODEL --soc host'")
    pt = select_point(doc, point)
    stored = doc.get("input_shapes")
    for name, shape in (input_shapes or {}).items():
        if stored is not None and [int(d) for d in shape] != stored.get(name):
            planned = ", ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in stored.items())
            raise input_error("--input-shape", name, f"{'x'.join(map(str, shape))} differs from the shapes the "
                              f"mapping was computed for ({planned})",
                              "run with those shapes, or optimize again with the new ones")
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or model),
                     input_shapes=stored if stored is not None else input_shapes)
    bg = coarsen(og, max_blocks=doc.get("search", {}).get("max_blocks"))
    if {b.name: list(b.ops) for b in bg.blocks} != doc["blocks"]:
        raise input_error(mapping_path, "blocks", "block structure differs from this model's",
                          "re-run 'parapipe optimize' with this version of parapipe")
    specs = stage_specs(pt)
    bindings = host_bindings([pu for st in specs for pu in st.pus], mapping_path)
    plan = build_plan(og, bg, specs, bindings)
    logger.info("point %s of %s: %d stage(s), %d task(s)", pt["id"], mapping_path, len(specs),
                sum(len(s) for s in plan.stages))
    return HostMapping(lm, og, bg, doc, pt, specs, plan)
