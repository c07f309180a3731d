"""The measured host profile (``--soc host``): SoC layout, block times on squeezenet, DB reuse, sanity."""
from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import yaml

from parapipe.errors import ExecutionError, InputError
from parapipe.graph.coarsen import coarsen
from parapipe.measure import submodels
from parapipe.profiledb.db import ProfileDB
from parapipe.profiledb.catalog import block_signature
from parapipe.measure.detect import fit_handoff
from parapipe.measure.local import LocalTimer, allowed_cpus, local_soc
from parapipe.measure.submodels import measure_local, measure_submodels
import ppexec.runtimes
from ppexec.plan import PUBinding
from ppexec.session import create_session, pin_current_thread
from parapipe.soc.loader import load_soc, soc_to_yaml_dict


class _Spy:
    """Counts the sessions of sub-models measure_local creates: timed ones (made by the runtime adapter,
    ppexec.runtimes.create_session) and load ones (submodels.create_session); the micro-benchmarks of the SoC
    (graph "detect") are not counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()
        self.affinities: list[frozenset] = []

    def __call__(self, model, binding, provider):
        import os

        if model.graph.name == "detect":
            return create_session(model, binding, provider)
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        self.affinities.append(frozenset(os.sched_getaffinity(0)))
        return create_session(model, binding, provider)

    def patch(self, mp) -> "_Spy":
        """Install on ``mp`` (a MonkeyPatch) where sessions are made."""
        mp.setattr(ppexec.runtimes, "create_session", self)
        mp.setattr(submodels, "create_session", self)
        return self


@pytest.fixture(scope="module")
def squeezenet(zoo_opgraph):
    og = zoo_opgraph("squeezenet")
    return og, coarsen(og)


@pytest.fixture(scope="module")
def first(squeezenet, tmp_path_factory):
    """One measured profile of squeezenet, stored in a fresh DB; the spy and progress calls of that run."""
    _, bg = squeezenet
    db = ProfileDB(tmp_path_factory.mktemp("hostdb") / "profile.sqlite")
    spy, calls = _Spy(), []
    with pytest.MonkeyPatch.context() as mp:
        spy.patch(mp)

        def progress(done: int, total: int) -> None:
            calls.append((done, total, threading.get_ident()))

        profile = measure_local(bg, repeats=5, warmup=2, db=db, progress=progress)
    yield profile, db, spy, calls
    db.close()


def test_every_block_on_every_pu_has_a_finite_positive_time(squeezenet, first):
    _, bg = squeezenet
    profile = first[0]
    assert set(profile.block_time_s) == {(b.name, pu) for b in bg.blocks for pu in profile.soc.pu_names}
    assert all(math.isfinite(t) and t > 0 for t in profile.block_time_s.values())
    for b in bg.blocks:  # measured on one core, copied to the others
        assert len({profile.block_time_s[(b.name, pu)] for pu in profile.soc.pu_names}) == 1
    assert profile.measure_s > 0


def test_blocks_are_measured_once_per_signature_on_the_first_core(squeezenet, first):
    og, bg = squeezenet
    _, db, spy, _ = first
    signatures = {block_signature(og, b) for b in bg.blocks}
    assert spy.calls == len(signatures) == len(db)
    assert all(aff == frozenset({allowed_cpus()[0]}) for aff in spy.affinities)
    assert threading.current_thread().name not in spy.threads
    rows = db.all("host")
    assert {r.pu for r in rows} == {first[0].soc.pu_names[0]} and {r.kind for r in rows} == {"block"}
    assert {r.signature for r in rows} == signatures
    assert all(r.repeats == 5 and r.median_s <= r.p90_s for r in rows)


def test_progress_is_reported_per_block_in_the_calling_thread(squeezenet, first):
    _, bg = squeezenet
    calls = first[3]
    n = len(bg.blocks)
    assert [(d, t) for d, t, _ in calls] == [(i, n) for i in range(1, n + 1)]
    assert {ident for _, _, ident in calls} == {threading.get_ident()}


def test_second_call_with_the_same_db_measures_nothing(squeezenet, first, monkeypatch):
    _, bg = squeezenet
    profile, db, _, _ = first
    rows_before = len(db)
    spy = _Spy()
    spy.patch(monkeypatch)
    again = measure_local(bg, repeats=5, warmup=2, db=db)
    assert spy.calls == 0
    assert again.block_time_s == profile.block_time_s
    assert len(db) == rows_before


def test_host_soc_has_one_pinned_single_thread_pu_per_allowed_core(first):
    soc = first[0].soc
    cpus = allowed_cpus()
    assert soc.name == "host"
    assert soc.pu_names == [f"cpu{c}" for c in cpus]
    for c in cpus:
        pu = soc.pus[f"cpu{c}"]
        assert pu.kind == "cpu" and pu.cores == 1 and pu.precision == "fp32" and pu.supported_ops is None
        assert pu.execution.cpus == (c,) and pu.execution.threads == 1
        assert pu.execution.provider == "CPUExecutionProvider"
        assert pu.peak_flops > 1e8 and pu.memory_bandwidth_bytes_per_s > 1e8 and pu.frequency_hz > 0
        assert 0 <= pu.op_overhead_s < 1e-2
        assert 0 <= pu.idle_power_w <= pu.active_power_w
    assert soc.provenance["pus.cpu%d.active_power_w" % cpus[0]].confidence == "low"
    assert soc.provenance["static_power_w"].confidence == "low"


def test_transfer_between_cores_is_positive(first):
    soc = first[0].soc
    default = soc.transfers.default
    assert math.isfinite(default.alpha_s) and default.alpha_s > 0
    assert math.isfinite(default.beta_bytes_per_s) and default.beta_bytes_per_s > 0
    if len(soc.pu_names) > 1:  # every ordered pair measured (as soc detect --per-core), the default their mean
        a, b = soc.pu_names[:2]
        pairs = [soc.transfer(x, y) for x in soc.pu_names for y in soc.pu_names if x != y]
        assert all(0 <= alpha < 1e-2 and beta > 0 for alpha, beta in pairs)
        if len(soc.pu_names) <= 4:
            assert default.alpha_s == pytest.approx(float(np.mean([p[0] for p in pairs])))
            assert default.beta_bytes_per_s == pytest.approx(float(np.mean([p[1] for p in pairs])))
        assert soc.transfer(a, a) == (0.0, math.inf)


def test_host_soc_round_trips_through_yaml(tmp_path):
    soc = local_soc(n_cpus=1, transfer=(2e-5, 5e9))
    assert soc.pu_names == [f"cpu{allowed_cpus()[0]}"]
    assert (soc.transfers.default.alpha_s, soc.transfers.default.beta_bytes_per_s) == (2e-5, 5e9)
    path = tmp_path / "host_copy.yaml"
    path.write_text(yaml.safe_dump(soc_to_yaml_dict(soc), sort_keys=False))
    loaded = load_soc(path)
    assert loaded.pus == soc.pus and loaded.transfers == soc.transfers
    assert "generated" not in loaded.sources  # every number of the host profile carries its own source


def test_sum_of_block_times_is_close_to_one_whole_model_run(squeezenet, first):
    """A sanity check, not a timing assert: block-by-block time within 3x of the whole model on one core."""
    og, bg = squeezenet
    profile = first[0]
    pu = profile.soc.pu_names[0]
    blocks_s = sum(profile.block_time_s[(b.name, pu)] for b in bg.blocks)
    cpu = allowed_cpus()[0]
    (name,) = og.inputs
    feeds = {name: np.random.default_rng(0).standard_normal(og.tensors[name].shape).astype(np.float32)}
    box = {}

    def whole() -> None:
        pin_current_thread(pu, (cpu,))
        sess = create_session(og.model, PUBinding(cpus=(cpu,), threads=1), "CPUExecutionProvider")
        for _ in range(2):
            sess.run(None, feeds)
        box["times"] = []
        for _ in range(5):
            start = time.perf_counter()
            sess.run(None, feeds)
            box["times"].append(time.perf_counter() - start)

    thread = threading.Thread(target=whole)
    thread.start()
    thread.join()
    whole_s = float(np.median(box["times"]))
    assert whole_s / 3 < blocks_s < 3 * whole_s, (blocks_s, whole_s)


def test_block_signature_is_stable_and_tells_blocks_apart(squeezenet, zoo_opgraph):
    og, bg = squeezenet
    again = coarsen(og)
    assert [block_signature(og, b) for b in bg.blocks] == [block_signature(og, b) for b in again.blocks]
    by_types: dict = {}
    for b in bg.blocks:
        by_types.setdefault(block_signature(og, b), set()).add(b.op_types)
    assert all(len(types) == 1 for types in by_types.values())
    assert len(by_types) > 1


@pytest.mark.parametrize("kwargs, field", [({"repeats": 0}, "repeats"), ({"warmup": -1}, "warmup"),
                                           ({"repeats": 2.5}, "repeats")])
def test_measure_host_rejects_bad_counts(squeezenet, kwargs, field):
    with pytest.raises(InputError, match=f"measure_local: {field}: must be an integer"):
        measure_local(squeezenet[1], **kwargs)


def test_host_soc_rejects_bad_core_counts_and_transfers():
    n = len(allowed_cpus())
    with pytest.raises(InputError, match=r"--soc host: n_cpus: must be between 1 and \d+ .* got 0"):
        local_soc(n_cpus=0)
    with pytest.raises(InputError, match=f"got {n + 1}; give fewer cores"):
        local_soc(n_cpus=n + 1)
    with pytest.raises(InputError, match=r"local_soc: transfer: must be \(alpha_s >= 0, beta_bytes_per_s > 0"):
        local_soc(transfer=(-1.0, 1e9))
    with pytest.raises(InputError, match="transfer"):
        local_soc(transfer=(1e-5, 0.0))


def test_a_hand_off_to_an_unusable_cpu_is_named():
    bad = max(allowed_cpus()) + 1000
    with pytest.raises(ExecutionError, match=f"cannot pin to CPUs \\({bad},\\)"):
        fit_handoff(LocalTimer(), [allowed_cpus()[0]], [bad], 1e10, repeats=2)


@pytest.mark.skipif(len(allowed_cpus()) < 2, reason="needs two allowed CPUs (the load runs on the others)")
def test_loaded_stage_level_times_keep_every_other_core_running_the_range(squeezenet, monkeypatch):
    _, bg = squeezenet
    spy = _Spy()
    spy.patch(monkeypatch)
    before = set(t.name for t in threading.enumerate())
    times = measure_submodels(bg, [(0, 1, 2, 3)], loaded=True, repeats=3, warmup=1)
    assert times[(0, 1, 2, 3)] > 0
    cpus = allowed_cpus()
    # one session timed on the first core, one spinning on each other core, each pinned to its own core
    assert spy.calls == len(cpus)
    assert sorted(spy.affinities, key=min) == [frozenset({c}) for c in cpus]
    assert set(t.name for t in threading.enumerate()) <= before  # the load threads are gone


def test_stage_level_times_run_each_range_as_one_pinned_sub_model(squeezenet, monkeypatch):
    _, bg = squeezenet
    n = len(bg.blocks)
    whole, head = tuple(range(n)), (0, 1, 2)
    spy = _Spy()
    spy.patch(monkeypatch)
    times = measure_submodels(bg, [whole, head, list(reversed(whole))], repeats=2, warmup=1, loaded=False)
    assert list(times) == [whole, head] and all(t > 0 for t in times.values())
    assert spy.calls == 2 and spy.affinities == [frozenset({allowed_cpus()[0]})] * 2
    for bad in [(), (-1, 2), (0, n)]:
        with pytest.raises(InputError, match="empty or not blocks of 0:"):
            measure_submodels(bg, [bad], loaded=False)
