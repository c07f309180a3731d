"""The search driver with the defaults users get (``parapipe optimize``'s), against brute force and on the zoo.

* Exactness: up to ``EXACT_MAX_CELLS`` blocks × PUs the front weakly covers every mapping of the spaces it
  claims — every pure pipeline with PU reuse (every PU per block), every hierarchical mapping with
  intra-stage parallelism (every cut × every PU group per stage, disjoint or reused, stages list-scheduled) and
  every hierarchical mapping with replicated stages (every cut × every plain or replicated stage, PUs disjoint) —
  on random tables up to 7 blocks × 3 PUs, and a 6-block A311D table
  (big, LITTLE and GPU times per block);
* CP-SAT's time unit (durations rounded up), its record in pareto.json;
* on the zoo (slow): the DP passes, without the baselines offered to the front, cover the single-PU and
  pure-pipeline baselines; every point re-evaluates exactly; the period bound holds and its proofs are real.
"""
from __future__ import annotations

import numpy as np
import pytest

from parapipe.cost.evaluate import evaluate
from parapipe.cost.mapping import StageMapping
from parapipe.cost.schedule import evaluate_stage
from parapipe.cost.problem import MappingProblem
from parapipe.search.options import EXACT_MAX_CELLS, SearchOptions
from parapipe.search.api import search
from parapipe.search.cpsat import TIME_UNIT_S, solve_stage
from parapipe.search.pareto import pareto_mask
from search_cases import (all_mapping_objectives, all_pipeline_objectives, all_replicated_objectives, random_problem,
                          uncovered)

ZOO_MODELS = ["alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]
ZOO_SOCS = ["amlogic_a311d", "black_sesame_a1000"]


def _front(result) -> np.ndarray:
    return np.array([p.objectives() for p in result.front()])


def _check_points(result) -> None:
    """Front non-dominated; every point's objectives are its mapping's, evaluated from scratch."""
    front = _front(result)
    assert pareto_mask(front).all(), "the parapipe front holds a dominated point"
    for p in result.points:
        ev = evaluate(result.problem, p.mapping)
        assert (ev.period_s, ev.latency_s, ev.energy_j) == pytest.approx(p.objectives(), rel=1e-12)
        assert p.evaluation.period_s >= result.bounds.period_lb_s * (1 - 1e-9)
        assert p.evaluation.latency_s >= result.bounds.latency_lb_s * (1 - 1e-9)


# Both spaces at 7 x 3 (the largest the exactness claim covers), smaller tables for the hierarchical space
# with PU reuse (its enumeration grows as 8^stages).
SIZES = [(7, 3, "chain"), (7, 3, "dag"), (7, 3, "diamond"), (6, 3, "dag"), (5, 3, "dag"), (7, 2, "dag"),
         (4, 3, "chain")]
DEFAULT_CASES = [(n, k, shape, seed) for n, k, shape in SIZES for seed in range(3)]


@pytest.mark.parametrize("n, k, shape, seed", DEFAULT_CASES,
                         ids=[f"{s}{n}x{k}-{seed}" for n, k, s, seed in DEFAULT_CASES])
def test_default_search_covers_every_mapping(n, k, shape, seed):
    pr = random_problem(n, k, 4000 + 100 * n + 10 * k + seed, shape)
    assert n * k <= EXACT_MAX_CELLS
    result = search(pr)  # the CLI's defaults
    assert result.info["exact"] is True
    _check_points(result)
    front = _front(result)
    spaces = {"pipelines with PU reuse": all_pipeline_objectives(pr),
              "hierarchical, disjoint groups": all_mapping_objectives(pr, reuse=False),
              "hierarchical, replicated stages": all_replicated_objectives(pr)}
    if 8 ** (n - 1) * k <= 40_000:  # hierarchical with PU reuse: every cut x every group per stage
        spaces["hierarchical, PU reuse"] = all_mapping_objectives(pr, reuse=True)
    for name, objs in spaces.items():
        missed = uncovered(objs, front)
        assert not len(missed), f"{name}: {len(missed)} mappings not covered, e.g. {missed[:3]}"
    # Every front point is a mapping of these spaces or a CP-SAT-polished one (no phantom objectives).
    everything = np.concatenate(list(spaces.values()))
    for p in result.front():
        if any(k.startswith("cp-sat") for k in p.stage_schedules):
            continue  # CP-SAT schedules lie outside the list-scheduled spaces
        if not np.any(np.all(np.isclose(everything, p.objectives(), rtol=1e-9, atol=0), axis=1)):
            assert "hierarchical, PU reuse" not in spaces, f"front point {p.id} {p.objectives()} in no space"


A311D_TABLE = """block,deps,out_bytes,t_big,t_little,t_gpu
b0,,802816,0.0106565,0.0289102,0.0119428
b1,b0,65536,0.0450491,0.0741524,0.0200939
b2,b1,65536,0.0237066,0.126246,0.0397061
b3,b2,4096,0.00634723,0.0163121,0.00408624
b4,b3,3211264,0.0102755,0.0199925,0.0085926
b5,b4,3211264,0.0307465,0.0754116,0.0120935
"""


def test_a311d_table_mappings_are_covered(tmp_path):
    from parapipe.cost.blocktable import read_block_table
    from parapipe.mapping.index import parse_pu_list
    from parapipe.soc import load_soc

    path = tmp_path / "T.csv"
    path.write_text(A311D_TABLE)
    pr = read_block_table(path, load_soc("amlogic_a311d").restrict(["big", "little", "gpu"]))
    result = search(pr, SearchOptions(seed=1))
    front = _front(result)
    for text in ("big,gpu,big,big,little,gpu", "big,gpu,big,big,gpu,gpu"):
        ev = evaluate(pr, parse_pu_list(pr, text))
        assert not len(uncovered(np.array([[ev.period_s, ev.latency_s, ev.energy_j]]), front)), text
    assert not len(uncovered(all_pipeline_objectives(pr), front))


def _tiny_blocks(n: int, t_s: float) -> MappingProblem:
    """``n`` independent blocks of ``t_s`` seconds on two identical PUs."""
    return MappingProblem([f"b{i}" for i in range(n)], [()] * n, {}, ["p0", "p1"], np.full((n, 2), t_s),
                          np.full((n, 2), 2.0), [0.1, 0.1], 1.0, np.full((2, 2), 1e-6), np.full((2, 2), 1e9))


def test_ctrl_c_after_a_cpsat_solve_is_still_a_keyboard_interrupt(tmp_path):
    """After CP-SAT solved a stage, SIGINT still raises KeyboardInterrupt (parapipe cleans up and says so) rather
    than killing the process silently: CP-SAT's own SIGINT handler is off."""
    import os
    import subprocess
    import sys

    script = tmp_path / "sigint.py"
    script.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # a background job starts with SIGINT ignored
        "import numpy as np\n"
        "from parapipe.cost.problem import MappingProblem\n"
        "from parapipe.search.cpsat import solve_stage\n"
        "pr = MappingProblem(['b0', 'b1'], [()] * 2, {}, ['p0', 'p1'], np.full((2, 2), 1e-3), np.full((2, 2), 2.0),\n"
        "                    [0.1, 0.1], 1.0, np.full((2, 2), 1e-6), np.full((2, 2), 1e9))\n"
        "assert solve_stage(pr, 0, 2, (0, 1), hint=None, time_limit_s=10.0) is not None\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(10)\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "KeyboardInterrupt"), done.stderr[-2000:]


def test_cpsat_rounds_durations_up():
    # Ten 40 ns blocks on 2 PUs: rounded to the nearest 0.1 us tick they lasted 0, any schedule was "optimal"
    # and CP-SAT could put all ten on one PU (400 ns). Rounded up, each lasts one tick: five per PU.
    pr = _tiny_blocks(10, 40e-9)
    sol = solve_stage(pr, 0, 10, (0, 1), hint=None, time_limit_s=10.0)
    assert sol is not None and sol.optimal
    assert sorted(np.bincount(sol.assignment, minlength=2).tolist()) == [5, 5]
    real = evaluate_stage(pr, StageMapping(0, 10, (0, 1), sol.assignment, sol.order), {})
    assert real.makespan_s == pytest.approx(200e-9, rel=1e-9)
    assert sol.makespan_s == pytest.approx(5 * TIME_UNIT_S) and sol.makespan_s >= real.makespan_s
    result = search(pr)
    assert result.best("throughput").evaluation.period_s == pytest.approx(200e-9, rel=1e-9)
    assert result.info["cpsat"]["time_unit_s"] == TIME_UNIT_S
    assert result.info["cpsat"]["rounding"] == "up"


def test_pareto_json_records_exactness(tmp_path):
    from parapipe.mapping import SocRef, doc_from_result

    def result_to_doc(result, name, sha, soc):
        return doc_from_result(result, name, sha, SocRef(name=soc)).model_dump(mode="json")

    small = search(random_problem(5, 3, 11, "dag"))
    doc = result_to_doc(small, "m", "0" * 64, "soc")
    assert doc["search"]["exact"] is True and doc["search"]["exact_max_cells"] == EXACT_MAX_CELLS
    assert all(doc["search"]["spaces"][s]["exact"] for s in ("disjoint", "pipeline", "reuse"))
    assert doc["search"]["cpsat"]["time_unit_s"] == TIME_UNIT_S
    big = search(random_problem(24, 3, 12, "dag"))
    doc = result_to_doc(big, "m", "0" * 64, "soc")
    assert doc["search"]["exact"] is False
    reuse = doc["search"]["spaces"]["reuse"]
    assert reuse["exact"] is False and reuse["epsilon"] > 0 and reuse["max_labels"] > 0
    assert {p["origin"] for p in doc["points"]} <= {"disjoint", "reuse", "replicated", "period", "relaxation", "cp-sat",
                                                   "baseline"}


def test_search_is_deterministic_with_cpsat_polish():
    pr = random_problem(6, 3, 31, "diamond")
    runs = [search(pr, SearchOptions(time_limit_s=30, seed=3, cpsat_stage_limit_s=10)) for _ in range(2)]
    assert any(k.startswith("cp-sat") for p in runs[0].points for k in p.stage_schedules)
    a, b = (np.array([p.objectives() for p in r.points]) for r in runs)
    np.testing.assert_array_equal(a, b)


def test_zoo_registry_names():
    from parapipe.graph.zoo import list_models

    # The nine onnx-wheel models this file searches are in the registry (which may list more).
    assert [m.name for m in list_models() if m.name in ZOO_MODELS] == ZOO_MODELS


@pytest.mark.slow
@pytest.mark.parametrize("soc", ZOO_SOCS)
@pytest.mark.parametrize("model", ZOO_MODELS)
def test_search_zoo_dp_covers_baselines_and_bound_holds(model, soc):
    from parapipe.app.prepare import prepare

    result = search(prepare(model, soc).problem)
    _check_points(result)
    # The DP passes search spaces that contain the single-PU and pure-pipeline baselines: their own points
    # (not the baselines the driver also offers to the front) must cover them.
    dp_points = [p for p in result.front()
                 if p.origin != "baseline" or any(k.startswith("cp-sat") for k in p.stage_schedules)]
    assert dp_points, "every front point came from a baseline"
    # (baselines re-timed at lower operating points lie outside the highest-point space the DP searches on large
    # problems: parapipe.search.dvfs)
    baselines = np.array([p.objectives() for p in result.points
                          if p.strategy in ("single", "pipeline") and not p.mapping.has_ops])
    missed = uncovered(baselines, np.array([p.objectives() for p in dp_points]))
    assert not len(missed), f"the DP passes miss baselines {missed}"
    # A proof of optimality means the bound is the best period found.
    best = min(p.evaluation.period_s for p in result.front())
    if result.bounds.period_proved_optimal:
        assert result.bounds.period_lb_s == pytest.approx(best, rel=1e-12)
    else:
        assert result.bounds.period_lb_s < best


def test_search_same_seed_same_front_squeezenet():
    from parapipe.app.prepare import prepare

    prep = prepare("squeezenet", "black_sesame_a1000")
    runs = [search(prep.problem, SearchOptions(time_limit_s=2, seed=0)) for _ in range(2)]
    a, b = (np.array([p.objectives() for p in r.front()]) for r in runs)
    assert len(a) >= 2
    np.testing.assert_array_equal(a, b)
    assert [p.mapping for p in runs[0].front()] == [p.mapping for p in runs[1].front()]
