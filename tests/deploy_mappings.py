"""Host mappings (pareto.json documents) written by hand for the deploy tests: real zoo models cut into two
pipeline stages on cpu0 | cpu1, without measuring the host (``parapipe optimize --soc host`` takes
seconds)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Sequence

from parapipe.graph.coarsen import coarsen
from parapipe.graph.opgraph import import_onnx
from parapipe.graph.zoo import load_model

MAX_BLOCKS = 48  # the default search granularity of 'parapipe optimize'


def _stage(pu: str, blocks: List[str], time_s: float) -> Dict:
    return {"pus": [pu], "blocks": blocks, "time_s": time_s, "input_s": 0.0, "makespan_s": time_s,
            "schedule": "chain", "assignment": {b: pu for b in blocks}, "order": blocks,
            "block_start_s": {}, "block_finish_s": {}}


def host_soc_ref(n_cpus: int = 2) -> Dict:
    """The ``soc`` entry of a host document: PUs ``cpu<i>`` pinned to CPU ``i``, one ORT thread each."""
    pus = {f"cpu{i}": {"kind": "cpu", "execution": {"cpus": [i], "threads": 1}} for i in range(n_cpus)}
    return {"name": "host", "sha256": "", "pus": pus}


def two_stage_doc(model: str, fractions: Sequence[float] = (0.5,)) -> Dict:
    """A pareto.json for ``model`` on ``--soc host`` with one two-stage point per FLOP fraction.

    Point ``p<i>`` puts the blocks up to the given fraction of the model's FLOPs on cpu0, the rest on cpu1
    (any prefix of the blocks' topological order is a valid cut). Its figures are nominal.
    """
    lm = load_model(model)
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path))
    bg = coarsen(og, max_blocks=MAX_BLOCKS)
    names = [b.name for b in bg.blocks]
    total = sum(b.flops for b in bg.blocks)
    points = []
    for i, fraction in enumerate(fractions):
        prefix, k = 0.0, 1
        for j, b in enumerate(bg.blocks[:-1]):
            prefix += b.flops
            if prefix >= fraction * total:
                k = j + 1
                break
        stages = [_stage("cpu0", names[:k], 0.02), _stage("cpu1", names[k:], 0.02)]
        points.append({"id": f"p{i}", "strategy": "pipeline", "pareto": True, "throughput_per_s": 50.0,
                       "period_s": 0.02, "latency_s": 0.04, "energy_j": 0.5, "period_gap": None,
                       "latency_gap": None, "pu_busy_s": {"cpu0": 0.02, "cpu1": 0.02},
                       "mapping": {"stages": stages}})
    return {"schema_version": 2, "model": {"name": lm.name, "sha256": lm.sha256}, "soc": host_soc_ref(),
            "objectives": ["throughput", "latency", "energy"],
            "search": {"max_blocks": MAX_BLOCKS, "seed": 0},
            "blocks": {b.name: list(b.ops) for b in bg.blocks},
            "bounds": {"period_lb_s": 0.01, "latency_lb_s": 0.03}, "points": points}


def write_doc(doc: Dict, path: Path) -> Path:
    """Write ``doc`` as JSON to ``path`` and return the path."""
    path.write_text(json.dumps(doc))
    return path


def replicated_doc(model: str, fraction: float = 0.5) -> Dict:
    """A pareto.json for ``model`` on ``--soc host`` with two replicated points (nominal figures):

    ``r0``: the whole model as one stage replicated on cpu0 and cpu1 (two pinned copies, frames alternate);
    ``r1``: the blocks up to ``fraction`` of the FLOPs replicated on cpu0 | cpu1, then the rest on cpu1.
    """
    doc = two_stage_doc(model, (fraction,))
    names = list(doc["blocks"])
    (cut,) = doc["points"]
    first = cut["mapping"]["stages"][0]["blocks"]

    def replicated(blocks: List[str]) -> Dict:
        stage = _stage("cpu0", blocks, 0.02)
        stage["replicas"] = [{"pus": [pu], "assignment": {b: pu for b in blocks}, "order": blocks, "share": 0.5,
                              "time_s": 0.02} for pu in ("cpu0", "cpu1")]
        return stage

    common = {"strategy": "replicated", "pareto": True, "throughput_per_s": 100.0, "period_s": 0.01,
              "latency_s": 0.02, "energy_j": 0.5, "period_gap": None, "latency_gap": None}
    doc["points"] = [
        dict(common, id="r0", pu_busy_s={"cpu0": 0.01, "cpu1": 0.01}, mapping={"stages": [replicated(names)]}),
        dict(common, id="r1", strategy="parapipe", pu_busy_s={"cpu0": 0.01, "cpu1": 0.03},
             mapping={"stages": [replicated(first), _stage("cpu1", names[len(first):], 0.02)]}),
    ]
    return doc


def two_model_workload_doc(models: Sequence[str] = ("squeezenet", "shufflenet"), rates: Sequence[float] = (1, 2),
                           fractions: Sequence[float] = (0.4, 0.6)) -> Dict:
    """A workload pareto.json for ``models`` on ``--soc host``: point ``w0`` runs each model cut in two stages on
    cpu0 | cpu1 (model ``i`` at ``fractions[i]`` of its FLOPs), so both PUs serve both models; nominal
    figures."""
    entries, mappings, latency = [], {}, {}
    for model, rate, fraction in zip(models, rates, fractions):
        one = two_stage_doc(model, (fraction,))
        entries.append({"model": one["model"], "rate": rate, "blocks": one["blocks"], "bounds": one["bounds"],
                        "search": {"max_blocks": MAX_BLOCKS}})
        mappings[one["model"]["name"]] = one["points"][0]["mapping"]
        latency[one["model"]["name"]] = 0.04
    point = {"id": "w0", "strategy": "parapipe", "pareto": True, "throughput_per_s": 20.0, "period_s": 0.05,
             "latency_s": 0.04, "energy_j": 1.0, "period_gap": None, "latency_gap": None,
             "latency_s_per_model": latency, "mappings": mappings}
    return {"schema_version": 2, "kind": "workload", "soc": host_soc_ref(), "models": entries, "latency_axis": "max",
            "search": {"max_blocks": MAX_BLOCKS}, "bounds": {"period_lb_s": 0.01, "latency_lb_s": 0.03},
            "points": [point]}
