"""Where each operator of a point runs: the model and its block graph loaded once with a point of a pareto.json
(:func:`load_mapped`), each block's stage and PUs (:func:`block_placements`), and the model written with every
node annotated (:func:`export_mapped`, ``parapipe export``), for Netron or any ONNX viewer.

The annotated model is the model as given (the ONNX file, or the registry model's graph), not parapipe's
normalised form: each node is matched to the operator of the normalised graph with its name and outputs, or,
where normalisation renamed it, with one of its outputs (:func:`parapipe.graph.normalize.normalise` keeps
tensor names). Nodes that normalisation evaluated into constants run on no PU and say so.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import onnx

from parapipe.errors import InputError, input_error
from parapipe.graph.coarsen import BlockGraph, coarsen
from parapipe.graph.opgraph import OpGraph, import_onnx
from parapipe.graph.zoo import LoadedModel, load_model
from parapipe.mapping import ParetoDoc, Point, check_model, read_pareto, select_point
from parapipe.mapping.model import Stage

log = logging.getLogger(__name__)

__all__ = ["MappedModel", "BlockPlacement", "load_mapped", "block_placements", "annotate_model", "export_mapped",
           "ExportSummary", "KEY_STAGE", "KEY_PU", "KEY_BLOCK", "KEY_REPLICAS", "KEY_NOTE"]

#: ``metadata_props`` keys written on every node (ONNX ``NodeProto.metadata_props``, IR >= 10; older readers
#: ignore the field). Stage numbers count from 0, as pareto.json, the Gantt charts and the executor's task
#: names (``s<stage>.<pu>.t<k>``) do.
KEY_STAGE = "parapipe.stage"
KEY_PU = "parapipe.pu"
KEY_BLOCK = "parapipe.block"
KEY_REPLICAS = "parapipe.replicas"
KEY_NOTE = "parapipe.note"
#: Keys written on the model itself (Netron shows them as the model's properties).
KEY_POINT = "parapipe.point"
KEY_MAPPING = "parapipe.mapping"
KEY_SOC = "parapipe.soc"


@dataclass(frozen=True)
class MappedModel:
    """A model loaded once (``loaded``), imported (``opgraph``) and coarsened (``blocks``) as the document
    ``doc`` was computed, and its point ``point``; ``source`` is the pareto.json path."""

    loaded: LoadedModel
    opgraph: OpGraph
    blocks: BlockGraph
    doc: ParetoDoc
    point: Point
    source: str


@dataclass(frozen=True)
class BlockPlacement:
    """Where one block runs: ``stage`` (from 0), ``pus`` (one per replica; one entry for a plain stage) and, for
    a replicated stage, ``shares`` (each replica's fraction of the frames, as ``pus``)."""

    stage: int
    pus: Tuple[str, ...]
    shares: Tuple[float, ...] = ()

    @property
    def replicated(self) -> bool:
        """Whether the block's stage is replicated (frames dealt to several replicas)."""
        return len(self.shares) > 1

    def replicas_text(self) -> str:
        """``"big (40 % of frames), gpu (60 % of frames)"``; empty for a plain stage."""
        return ", ".join(f"{pu} ({share:.0%} of frames)" for pu, share in zip(self.pus, self.shares))


def load_mapped(model: Optional[str], mapping_path: str, point: str) -> MappedModel:
    """Read ``mapping_path``, select ``point``, and load, import and coarsen ``model`` once, as the document was
    computed (its input shapes and ``max_blocks``).

    Parameters
    ----------
    model : str, optional
        Registry name or .onnx path; default: the model the document names (``model.name``).
    mapping_path : str
        pareto.json written by ``parapipe optimize``.
    point : str
        Point id or ``best-throughput`` | ``best-latency`` | ``best-energy``.

    Raises
    ------
    InputError
        Unreadable mapping, unknown point, a model other than the document's (SHA-256), a document naming a
        model that is not in the registry when ``model`` is not given, blocks that differ from the model's.
    """
    doc = read_pareto(mapping_path)
    pt = select_point(doc, point, path=mapping_path)
    try:
        lm = load_model(model or doc.model.name)
    except InputError:
        if model:
            raise
        raise input_error(mapping_path, "model.name", f"names model {doc.model.name!r}, which is not a registry "
                          "model", "pass the model's .onnx file as MODEL (--model with plot)") from None
    check_model(doc, lm, mapping_path)
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or lm.name), input_shapes=doc.input_shapes)
    bg = coarsen(og, max_blocks=doc.search.get("max_blocks"))
    if doc.blocks and {b.name: list(b.ops) for b in bg.blocks} != doc.blocks:
        raise input_error(mapping_path, "blocks", "block structure differs from this model's",
                          "re-run 'parapipe optimize' with this version of parapipe")
    return MappedModel(lm, og, bg, doc, pt, mapping_path)


def _stage_placements(j: int, st: Stage) -> Dict[str, BlockPlacement]:
    reps = st.replica_stages()
    shares = tuple(r.share for r in st.replicas) if st.replicas else ()
    return {b: BlockPlacement(j, tuple(r.pu_of(b) for r in reps), shares) for b in st.blocks}


def block_placements(point: Point) -> Dict[str, BlockPlacement]:
    """Block name -> its :class:`BlockPlacement` in ``point`` (every block of the point's stages)."""
    out: Dict[str, BlockPlacement] = {}
    for j, st in enumerate(point.stages):
        out.update(_stage_placements(j, st))
    return out


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_mapped` wrote: the file, the point, and how many of the model's top-level nodes were
    annotated with a stage (``placed``) or as folded constants (``folded``), of ``nodes``."""

    path: str
    point: str
    nodes: int
    placed: int
    folded: int


def _op_of_nodes(model: onnx.ModelProto, og: OpGraph) -> List[Optional[str]]:
    """For each top-level node of ``model``: the operator of ``og`` it became (same name and outputs, else one
    of its outputs), or None (folded into a constant, or dropped as unused)."""
    producer: Dict[str, str] = {}
    for name, op in og.graph.nodes(data="op"):
        for t in op.outputs:
            producer[t] = name
    out: List[Optional[str]] = []
    for node in model.graph.node:
        outs = [t for t in node.output if t]
        if node.name in og.graph and set(og.op(node.name).outputs) & set(outs):
            out.append(node.name)
            continue
        out.append(next((producer[t] for t in outs if t in producer), None))
    return out


def _set_props(proto, props: Dict[str, str]) -> None:
    """Replace the ``parapipe.*`` entries of ``proto.metadata_props`` with ``props`` (others are kept)."""
    kept = [(e.key, e.value) for e in proto.metadata_props if not e.key.startswith("parapipe.")]
    del proto.metadata_props[:]
    for key, value in kept + sorted(props.items()):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value


def annotate_model(mapped: MappedModel) -> Tuple[onnx.ModelProto, int, int]:
    """A copy of the loaded model with every top-level node annotated (see the module docstring).

    Returns
    -------
    (onnx.ModelProto, int, int)
        The annotated copy, the nodes given a stage, the nodes marked as folded constants. A node of a plain
        stage gets ``parapipe.stage``, ``parapipe.pu`` and ``parapipe.block``; of a replicated stage also
        ``parapipe.replicas`` (``"big (40 % of frames), gpu (60 % of frames)"``) and ``parapipe.pu`` lists
        every replica's PU (``"big,gpu"``); a folded node gets ``parapipe.note`` only. The model gets
        ``parapipe.point``, ``parapipe.mapping`` (stages as the front table writes them) and ``parapipe.soc``.
    """
    from parapipe.mapping.model import stages_text

    model = onnx.ModelProto()
    model.CopyFrom(mapped.loaded.model)
    where = block_placements(mapped.point)
    placed = folded = 0
    for node, op in zip(model.graph.node, _op_of_nodes(model, mapped.opgraph)):
        if op is None:
            _set_props(node, {KEY_NOTE: "evaluated into a constant by parapipe when loading the model: "
                                        "runs on no PU"})
            folded += 1
            continue
        block = mapped.blocks.op_to_block[op]
        at = where[block]
        props = {KEY_STAGE: str(at.stage), KEY_PU: ",".join(dict.fromkeys(at.pus)), KEY_BLOCK: block}
        if at.replicated:
            props[KEY_REPLICAS] = at.replicas_text()
        _set_props(node, props)
        placed += 1
    pt = mapped.point
    _set_props(model, {KEY_POINT: f"{pt.id} ({pt.strategy}) of {Path(mapped.source).name}",
                       KEY_MAPPING: stages_text(pt.stages), KEY_SOC: mapped.doc.soc.name})
    return model, placed, folded


def export_mapped(model: Optional[str], mapping_path: str, point: str, out: str) -> ExportSummary:
    """Write ``model`` with every node annotated with where ``point`` of ``mapping_path`` runs it
    (:func:`annotate_model`), checked with :func:`onnx.checker.check_model`, atomically (a temp file in the
    folder of ``out``, then renamed).

    Models over 2 GB are written with their weights in ``<out>.data`` next to it (ONNX external data).

    Raises
    ------
    InputError
        As :func:`load_mapped`; ``--out``: the folder does not exist or cannot be written.
    """
    from parapipe.files import atomic_path

    mapped = load_mapped(model, mapping_path, point)
    annotated, placed, folded = annotate_model(mapped)
    path = Path(out)
    if not path.parent.is_dir():
        raise input_error("--out", out, "its folder does not exist", "create the folder or choose another path")
    large = annotated.ByteSize() > onnx.checker.MAXIMUM_PROTOBUF
    try:
        with atomic_path(path, suffix=".onnx") as tmp:
            if large:
                onnx.save_model(annotated, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True,
                                location=path.name + ".data")
                onnx.checker.check_model(str(tmp))
            else:
                onnx.checker.check_model(annotated)
                onnx.save_model(annotated, str(tmp))
    except OSError as exc:
        raise input_error("--out", out, f"cannot be written ({exc.strerror or exc})",
                          "choose a writable folder") from None
    log.info("%s: %d of %d nodes placed, %d folded", out, placed, len(annotated.graph.node), folded)
    return ExportSummary(str(path), mapped.point.id, len(annotated.graph.node), placed, folded)
