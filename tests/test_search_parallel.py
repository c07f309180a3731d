"""The DP passes and the CP-SAT polish in forked worker processes (:mod:`parapipe.search.parallel`) give what
they give in one process: the same fronts and reports (seconds apart), a polish whose worker dies run here, the
reuse pass's larger budget when the disjoint pass finds nothing, a child's exception raised in the parent, the
wall-clock safety limit reported; Ctrl-C ends the parent with KeyboardInterrupt and leaves no worker process
behind; the load that decides the workers leaves out this process's own children."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import asdict

import pytest

import parapipe.search.budget as budget
import parapipe.search.passes as passes
from parapipe.cost.problem import MappingProblem
from parapipe.search.options import SearchOptions
from parapipe.search.api import search
from parapipe.search.budget import WALL
from parapipe.search.dvfs import resolve_operating_points
from parapipe.search.passes import pass_workers, run_passes
from parapipe.search.transitions import StageCatalog

from search_cases import random_problem


def _passes(pr: MappingProblem, workers: int, **kw):
    opts = SearchOptions(workers=workers, **kw)
    small = pr.n_blocks * pr.n_pus <= opts.exact_max_cells
    ops = resolve_operating_points(pr, opts.operating_points, small)
    found, reports, states = run_passes(pr, opts, StageCatalog(pr, ops.op_sets if ops.where == "dp" else None))
    return found, {name: {**asdict(r), "seconds": None} for name, r in reports.items()}, states


def test_parallel_passes_give_the_sequential_results_on_a_zoo_model():
    from parapipe.app.prepare import prepare

    pr = prepare("densenet121", "black_sesame_a1000").problem
    assert pr.n_blocks * pr.n_pus >= passes.PARALLEL_MIN_CELLS  # the size the automatic choice forks at
    one = _passes(pr, 1)
    assert one[0]["reuse"] and one[0]["replicated"] and one[0]["disjoint"]
    assert _passes(pr, 3) == one  # both passes forked
    assert _passes(pr, 2) == one  # reuse forked, replicated here


def _whole(result):
    """Everything a search result reports but its seconds: every point, the bounds, the spaces, the polish."""
    drop = {"seconds"}
    return ([(p.id, p.strategy, p.mapping, p.objectives(), p.origin, p.pareto, p.stage_schedules)
             for p in result.points], result.bounds.info(),
            {k: {f: v for f, v in s.items() if f not in drop} for k, s in result.info["spaces"].items()},
            result.info["cpsat"])


def test_parallel_search_gives_the_sequential_front():
    """DP passes forked, then the CP-SAT polish forked next to the bounds: the same result as in one process."""
    pr = random_problem(20, 4, seed=2)  # 10 solves for the baselines, 6 for the DP's candidates
    a, b = (search(pr, SearchOptions(workers=w, time_limit_s=2)) for w in (1, 3))
    assert a.info["cpsat"]["solves"] == 16 and any(p.origin == "cp-sat" for p in a.points)
    assert _whole(a) == _whole(b)


def test_a_polish_that_fails_only_in_its_worker_is_run_again_here(monkeypatch):
    """The polish's worker dies without an answer: the polish runs here, with the result of one process."""
    import parapipe.search.api as api

    pr = random_problem(20, 4, seed=2)
    one = _whole(search(pr, SearchOptions(workers=1, time_limit_s=2)))
    parent, real, forked = os.getpid(), api._polish_candidates, []

    def only_here(*args, **kw):
        if os.getpid() != parent:
            os._exit(3)
        forked.append(False)
        return real(*args, **kw)

    real_workers = passes.pass_workers

    def counted(*args, **kw):
        forked.append(True)
        return real_workers(*args, **kw)

    monkeypatch.setattr(api, "_polish_candidates", only_here)
    monkeypatch.setattr(api, "pass_workers", counted)
    assert _whole(search(pr, SearchOptions(workers=3, time_limit_s=2))) == one
    assert forked == [True, False]  # the polish was forked, died there, and ran here once


def test_the_reuse_pass_gets_its_larger_budget_when_the_disjoint_pass_finds_nothing(monkeypatch):
    real = passes._disjoint

    def finds_nothing(*args, **kw):  # as on a problem where no mapping has disjoint stages
        out, reports, states = real(*args, **kw)
        return {**out, "disjoint": []}, reports, states

    monkeypatch.setattr(passes, "_disjoint", finds_nothing)
    pr = random_problem(20, 4, seed=5)
    one = _passes(pr, 1)
    assert one[0]["reuse"] and one[1]["reuse"]["time_limit_s"] == 10 * SearchOptions().reuse_time_limit_s
    assert _passes(pr, 3) == one


def test_an_exception_in_a_worker_is_raised_by_the_parent(monkeypatch):
    def broken(*args, **kw):
        raise ValueError("replicated pass broke")

    monkeypatch.setattr(passes, "replicated_front", broken)
    with pytest.raises(ValueError, match="replicated pass broke"):
        _passes(random_problem(8, 3, seed=1), 3)


def test_a_pass_that_fails_only_in_its_worker_is_run_again_here(monkeypatch):
    parent = os.getpid()
    real = passes.replicated_front

    def only_here(*args, **kw):
        if os.getpid() != parent:
            os._exit(3)  # a worker that dies without an answer
        return real(*args, **kw)

    pr = random_problem(8, 3, seed=1)
    one = _passes(pr, 1)
    monkeypatch.setattr(passes, "replicated_front", only_here)
    assert _passes(pr, 3) == one


def test_the_wall_clock_safety_limit_stops_forked_passes_and_is_reported(monkeypatch):
    monkeypatch.setattr(budget, "SAFETY_FLOOR_S", 0.0)
    pr = random_problem(20, 4, seed=5)
    one = _passes(pr, 1, wall_safety_factor=1e-9)
    assert one[1]["reuse"]["stopped_by"] == WALL and one[1]["replicated"]["stopped_by"] == WALL
    par = _passes(pr, 3, wall_safety_factor=1e-9)
    assert {n: (r["stopped_by"], r["timed_out"]) for n, r in par[1].items()} == \
           {n: (r["stopped_by"], r["timed_out"]) for n, r in one[1].items()}


def test_automatic_workers_fork_only_large_problems_where_cpus_are_idle(monkeypatch):
    big, tiny = random_problem(24, 4, seed=5), random_problem(5, 3, seed=1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(passes, "_other_runnable", lambda: 0)
    assert pass_workers(big, SearchOptions()) == 3 and pass_workers(tiny, SearchOptions()) == 1
    assert pass_workers(big, SearchOptions(workers=1)) == 1 and pass_workers(tiny, SearchOptions(workers=2)) == 2
    monkeypatch.setattr(passes, "_other_runnable", lambda: 3)
    assert pass_workers(big, SearchOptions()) == 2  # one CPU idle
    monkeypatch.setattr(passes, "_other_runnable", lambda: 4)
    assert pass_workers(big, SearchOptions()) == 1
    monkeypatch.setattr(passes, "_other_runnable", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert pass_workers(big, SearchOptions()) == 3  # three processes share two idle CPUs
    monkeypatch.setattr(passes, "_other_runnable", lambda: 1)
    assert pass_workers(big, SearchOptions()) == 2
    monkeypatch.setattr(passes, "_other_runnable", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert pass_workers(big, SearchOptions()) == 1
    monkeypatch.undo()
    assert 0 <= passes._other_runnable() < 10_000


def test_this_process_s_own_running_children_are_not_counted_as_other_load():
    """A child that spins (as the plot process importing matplotlib) is counted by ``_running_children``, which
    ``_other_runnable`` takes off the machine's count; once it has exited it is not."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time

        deadline = time.monotonic() + 60
        while passes._running_children() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the interpreter has started and spins
        assert passes._running_children() >= 1
    finally:
        child.kill()
        child.wait()
    assert passes._running_children() == 0


@pytest.mark.parametrize("to", ["group", "parent"])
def test_ctrl_c_during_parallel_passes_ends_parent_and_workers(tmp_path, to):
    """SIGINT to the process group (a terminal's Ctrl-C) or to the parent alone while the workers run (their
    passes made slow): the parent raises KeyboardInterrupt as usual, no worker prints a traceback, the parent
    terminates the workers rather than waiting for them, and no worker process is left."""
    script = tmp_path / "sigint.py"
    script.write_text(
        "import os, signal, sys, time, multiprocessing\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"  # a background job starts with SIGINT ignored
        "sys.path.insert(0, sys.argv[1])\n"
        "from search_cases import random_problem\n"
        "import parapipe.search.passes as passes\n"
        "from parapipe.search.options import SearchOptions\n"
        "from parapipe.search.transitions import StageCatalog\n"
        "parent = os.getpid()\n"
        "def slow(real):\n"
        "    def run(*args, **kw):\n"
        "        if os.getpid() != parent:\n"
        "            time.sleep(100)\n"
        "        return real(*args, **kw)\n"
        "    return run\n"
        "passes._reuse, passes._replicated = slow(passes._reuse), slow(passes._replicated)\n"
        "pr = random_problem(24, 4, seed=5)\n"
        "seen = []\n"
        "def progress(i):\n"
        "    if i == 2:\n"
        "        seen.extend(multiprocessing.active_children())\n"
        "        print('workers', *[p.pid for p in seen], flush=True)\n"
        f"        os.kill(-os.getpgid(0) if {to == 'group'} else os.getpid(), signal.SIGINT)\n"
        "try:\n"
        "    passes.run_passes(pr, SearchOptions(workers=3), StageCatalog(pr), progress)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt', multiprocessing.active_children(), *[p.exitcode for p in seen])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    tests = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, str(script), tests], capture_output=True, text=True, timeout=60,
                          env=env, start_new_session=True)
    lines = done.stdout.splitlines()
    term = -int(signal.SIGTERM)
    assert done.returncode == 0 and lines[-1] == f"KeyboardInterrupt [] {term} {term}", (done.stdout,
                                                                                        done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for pid in [int(x) for x in lines[0].split()[1:]]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _wait_for(path: str) -> bool:
    """A job: wait (at most 60 s) until ``path`` exists; whether it did."""
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.path.exists(path)


def test_idle_work_runs_here_only_while_a_worker_is_still_busy(tmp_path):
    """``idle()`` runs after ``here()`` when a child has not answered yet (the child here waits for the file that
    idle() writes, so it would never see it otherwise), and not once every child has answered (here() returns
    only after its child has exited, so its answer is in the pipe)."""
    import multiprocessing

    from parapipe.search.parallel import run_in_workers

    flag = tmp_path / "idle-ran"
    calls = []

    def idle():
        calls.append("idle")
        flag.write_text("")

    mine, results = run_in_workers({"wait": (_wait_for, (str(flag),))}, 1, lambda: ("here",), idle=idle)
    assert (mine, results, calls) == ("here", {"wait": True}, ["idle"])

    def here_after_the_child():
        while multiprocessing.active_children():  # reaps the child once it has exited
            pass
        return ("here",)

    calls.clear()
    mine, results = run_in_workers({"pid": (os.getpid, ())}, 1, here_after_the_child, idle=idle)
    assert mine == "here" and isinstance(results["pid"], int) and calls == []


def test_the_search_imports_its_solvers_while_it_waits_for_the_workers(monkeypatch):
    """With polishing on and forked passes, the passes hand the solvers' import to the workers' idle time (CP-SAT
    only where the disjoint pass or the parallel baselines have a stage to polish); without polishing nothing."""
    import parapipe.search.parallel as parallel

    seen, imported = [], []
    real = parallel.run_in_workers

    def spy(jobs, n_workers, here, idle=None):
        seen.append(idle)
        n = len(imported)
        got = real(jobs, n_workers, here, idle=idle)
        if idle is not None and len(imported) == n:  # the workers were done before: what it would have imported
            idle()
        return got

    monkeypatch.setattr(parallel, "run_in_workers", spy)
    monkeypatch.setattr(passes, "import_solvers", lambda cpsat=True: imported.append(cpsat))
    pr = random_problem(24, 4, seed=3)
    _passes(pr, 3)
    _passes(pr, 3, polish=False)
    assert seen[0] is not None and seen[1] is None
    assert imported == [True]
    _passes(pr, 3, cpsat_max_blocks=1)  # no stage of one block on two PUs or more: nothing for CP-SAT
    assert imported == [True, False]


def test_cpsat_is_wanted_for_a_polishable_stage_of_the_disjoint_pass_or_of_a_parallel_baseline():
    from parapipe.cost.mapping import Mapping, StageMapping

    pr = random_problem(12, 3, seed=1)
    singles = Mapping((StageMapping(0, 6, (0,), (0,) * 6), StageMapping(6, 12, (1,), (1,) * 6)))
    group = Mapping((StageMapping(0, 6, (0,), (0,) * 6), StageMapping(6, 12, (1, 2), (1, 2) * 3)))
    opts = SearchOptions(cpsat_max_blocks=6)  # the parallel baselines' one stage holds 12 blocks: too large
    assert not passes.cpsat_wanted(pr, opts, [singles])
    assert passes.cpsat_wanted(pr, opts, [singles, group])
    assert not passes.cpsat_wanted(pr, SearchOptions(cpsat_max_blocks=6, polish=False), [group])
    assert passes.cpsat_wanted(pr, SearchOptions(cpsat_max_blocks=12), [singles])  # the parallel baselines'
