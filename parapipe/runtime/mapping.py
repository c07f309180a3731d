"""From a pareto.json point to an execution plan bound as the SoC profile says, on any board.

Every PU of the point runs as its profile's ``execution`` block (embedded in the document, see
:class:`parapipe.mapping.SocRef`) says: pinned CPUs and thread count, runtime adapter, execution provider and
options. ``--bind PU=CPUS`` substitutes a PU: it runs on those CPUs with ONNX Runtime's CPU provider instead, so a
point computed for one board can be tried on another machine (its prediction then no longer applies).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ppexec.plan import ExecutionPlan, PUBinding

from parapipe.errors import input_error
from parapipe.runtime.plan import StageSpec, build_plan

logger = logging.getLogger(__name__)

__all__ = ["LoadedMapping", "parse_binds", "parse_cpus", "bindings_for", "stage_specs", "load_mapping"]

_CPUS = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


@dataclass
class LoadedMapping:
    """One point of a pareto.json with its model and its execution plan.

    Attributes
    ----------
    loaded : parapipe.graph.zoo.LoadedModel
    opgraph : parapipe.graph.opgraph.OpGraph
    block_graph : parapipe.graph.coarsen.BlockGraph
        Coarsened as the mapping was (``search.max_blocks`` of the document).
    doc : parapipe.mapping.ParetoDoc
    point : parapipe.mapping.Point
    stages : list of StageSpec
    plan : ExecutionPlan
        Bindings as the profile says, except the substituted PUs.
    substituted : dict of str to tuple of int
        PU -> CPUs it runs on instead of its profile binding (``--bind``).
    source : str
        The mapping file (for messages).
    feeds : str, optional
        An .npz of input frames (``--feeds``) the run uses instead of generated ones.
    """

    loaded: Any
    opgraph: Any
    block_graph: Any
    doc: Any
    point: Any
    stages: List[StageSpec]
    plan: ExecutionPlan
    substituted: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    source: str = "mapping"
    feeds: Optional[str] = None

    @property
    def predicted_throughput_per_s(self) -> float:
        """``1 / period_s`` of the point (the cost model's throughput)."""
        return 1.0 / float(self.point.period_s)

    @property
    def predicted_latency_s(self) -> float:
        """The point's modelled latency, s."""
        return float(self.point.latency_s)


def parse_cpus(text: str, source: str = "--bind") -> Tuple[int, ...]:
    """CPU ids from ``0``, ``0-3`` or ``0,2,4-5`` (sorted, distinct).

    Raises
    ------
    InputError
        Anything else, or a range that runs backwards.
    """
    if not _CPUS.match(text or ""):
        raise input_error(source, None, f"{text!r} is not a CPU list", "write CPU ids like 0, 0-3 or 0,2")
    cpus = set()
    for part in text.replace(" ", "").split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise input_error(source, None, f"range {part!r} runs backwards", f"write {b}-{a}")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


def parse_binds(items: Optional[Sequence[str]]) -> Dict[str, Tuple[int, ...]]:
    """``["big=0-3", "gpu=1"]`` -> ``{"big": (0, 1, 2, 3), "gpu": (1,)}``.

    Raises
    ------
    InputError
        An item without ``=``, an empty PU name, a PU given twice, a bad CPU list.
    """
    binds: Dict[str, Tuple[int, ...]] = {}
    for item in items or ():
        pu, eq, cpus = item.partition("=")
        pu = pu.strip()
        if not eq or not pu:
            raise input_error("--bind", None, f"{item!r} is not PU=CPUS", "write e.g. --bind big=0-3")
        if pu in binds:
            raise input_error("--bind", pu, "given twice", "bind each PU once")
        binds[pu] = parse_cpus(cpus, f"--bind {pu}")
    return binds


def bindings_for(doc, point, binds: Optional[Mapping[str, Sequence[int]]] = None,
                 source: str = "mapping") -> Tuple[Dict[str, PUBinding], Dict[str, Tuple[int, ...]]]:
    """The binding of every PU the point uses, and the substituted PUs.

    A PU named in ``binds`` runs on those CPUs with ONNX Runtime's CPU provider, one thread per CPU; every other
    PU as ``doc.soc.pus[pu].execution`` says.

    Raises
    ------
    InputError
        A PU the document's profile does not describe, or a bound PU that neither the point nor the profile has.
    """
    binds = dict(binds or {})
    used = point.used_pus()
    known = set(doc.soc.pus) | set(used)
    for pu in binds:
        if pu not in known:
            raise input_error("--bind", pu, f"no PU {pu!r} in SoC {doc.soc.name!r}",
                              f"bind one of {', '.join(sorted(known))}")
    bindings: Dict[str, PUBinding] = {}
    substituted: Dict[str, Tuple[int, ...]] = {}
    for pu in used:
        if pu in binds:
            cpus = tuple(int(c) for c in binds[pu])
            bindings[pu] = PUBinding(cpus=cpus, threads=len(cpus))
            substituted[pu] = cpus
            continue
        ref = doc.soc.pus.get(pu)
        if ref is None:
            raise input_error(source, "soc.pus", f"PU {pu!r} of point {point.id} has no execution binding",
                              f"re-run 'parapipe optimize', or run it elsewhere with --bind {pu}=CPUS")
        ex = ref.execution
        bindings[pu] = PUBinding(cpus=ex.cpus, threads=ex.threads, provider=ex.provider,
                                 provider_options=dict(ex.provider_options), runtime=ex.runtime,
                                 runtime_options=dict(ex.runtime_options))
    return bindings, substituted


def stage_specs(point) -> List[StageSpec]:
    """The point's stages as :class:`StageSpec` (``pus``, ``assignment``, ``order`` of each stage; the other
    replicas and every replica's share of the frames for a replicated stage)."""
    specs = []
    for st in point.stages:
        spec = StageSpec(pus=list(st.pus), assignment={b: st.pu_of(b) for b in st.blocks},
                         order=st.execution_order())
        if st.replicas:
            spec.replicas = [StageSpec(pus=list(r.pus), assignment={b: r.pu_of(b) for b in st.blocks},
                                       order=list(r.order) or st.execution_order()) for r in st.replicas[1:]]
            spec.shares = [float(r.share) for r in st.replicas]
        specs.append(spec)
    return specs


def load_mapping(model: str, mapping_path: str, point: str,
                 binds: Optional[Mapping[str, Sequence[int]]] = None,
                 input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> LoadedMapping:
    """Load ``model``, read the mapping, select ``point`` and build its execution plan.

    Parameters
    ----------
    model : str
        Registry name or .onnx path (the model the mapping was computed for).
    mapping_path : str
        pareto.json written by ``parapipe optimize`` for any SoC profile.
    point : str
        Point id or ``best-throughput`` | ``best-latency`` | ``best-energy``.
    binds : dict of str to sequence of int, optional
        PUs to run on CPUs instead (``--bind``).
    input_shapes : dict of str to sequence of int, optional
        ``--input-shape`` values; they must equal the shapes stored in the mapping (``input_shapes``), which are
        used when none are given.

    Raises
    ------
    InputError
        Unreadable or inconsistent mapping, a mapping for another model (sha256), input shapes other than those
        the mapping was computed for, an unknown point, block names that do not match the model, a bad
        ``--bind``.
    """
    from parapipe.graph.coarsen import coarsen
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model
    from parapipe.mapping import check_model, read_pareto, select_point

    doc = read_pareto(mapping_path)
    lm = load_model(model)
    check_model(doc, lm, mapping_path)
    pt = select_point(doc, point, path=mapping_path)
    stored = doc.input_shapes
    for name, shape in (input_shapes or {}).items():
        if stored is not None and [int(d) for d in shape] != stored.get(name):
            planned = ", ".join(f"{k}:{'x'.join(map(str, v))}" for k, v in stored.items())
            raise input_error("--input-shape", name, f"{'x'.join(map(str, shape))} differs from the shapes the "
                              f"mapping was computed for ({planned})",
                              "run with those shapes, or optimize again with the new ones")
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or model),
                     input_shapes=stored if stored is not None else input_shapes)
    bg = coarsen(og, max_blocks=doc.search.get("max_blocks"))
    if {b.name: list(b.ops) for b in bg.blocks} != doc.blocks:
        raise input_error(mapping_path, "blocks", "block structure differs from this model's",
                          "re-run 'parapipe optimize' with this version of parapipe")
    bindings, substituted = bindings_for(doc, pt, binds, mapping_path)
    specs = stage_specs(pt)
    plan = build_plan(og, bg, specs, bindings)
    logger.info("point %s of %s: %d stage(s), %d task(s)", pt.id, mapping_path, len(specs),
                sum(len(s) for s in plan.stages))
    return LoadedMapping(lm, og, bg, doc, pt, specs, plan, substituted, mapping_path)
