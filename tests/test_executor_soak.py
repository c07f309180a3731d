"""A short soak of the pipelined executor on a real zoo model: 500 frames through one executor, every output
in order and equal to the unsplit model's, and no memory growth per frame (RSS, loosely bounded).

The light zoo models have constant weights: their final outputs are the same for every input. The check
therefore also covers every tensor a task hands on (input-dependent), which is what reveals a wrong order."""
from __future__ import annotations

import os

import numpy as np
import pytest

from deploy_mappings import two_stage_doc, write_doc
from ppexec.executor import PipelineExecutor
from ppexec.reference import max_abs_diff, reference_outputs
from parapipe.app.run import load_mapping
from ppexec.reference import handed_over_tensors, max_scaled_diff, with_outputs
from parapipe.execution.reference import reference_with_outputs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="host mappings use CPUs 0, 1")]

FRAMES = 500
RUN_FRAMES = 100  # frames per run(): long streams go through one executor as consecutive runs
DISTINCT = 7  # distinct inputs fed cyclically; prime to RUN_FRAMES, so run boundaries shift the phase
#: Allowed RSS growth between the end of the first run and the end of the last, bytes. Leaking one
#: squeezenet input per frame (602 KB) over the 400 later frames would add 240 MB; allocator noise here is a
#: few MB.
RSS_GROWTH_BOUND_NBYTES = 48 * 2**20


def rss_bytes() -> int:
    """Resident set size of this process (/proc/self/statm, second field, in pages: proc(5))."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_500_frames_in_order_identical_and_flat_memory(tmp_path):
    path = write_doc(two_stage_doc("squeezenet"), tmp_path / "p.json")
    mapping = load_mapping("squeezenet", str(path), "p0")
    og = mapping.opgraph
    (name,) = og.inputs
    reference, handed = reference_with_outputs(mapping.loaded.model, og, handed_over_tensors(mapping.plan))
    assert handed
    plan = with_outputs(mapping.plan, handed)
    rng = np.random.default_rng(11)
    pool = [{name: rng.standard_normal(og.tensors[name].shape).astype(np.float32)} for _ in range(DISTINCT)]
    ref = reference_outputs(reference, pool)
    # the frames are told apart by the handed-over tensors (not by the constant-weight model's output)
    assert min(max_scaled_diff(ref[i], ref[(i + 1) % DISTINCT], handed) for i in range(DISTINCT)) > 1e-3
    rss, worst, checked = [], 0.0, 0
    with PipelineExecutor(plan) as ex:
        for start in range(0, FRAMES, RUN_FRAMES):
            for i, out in enumerate(ex.run(pool[(start + j) % DISTINCT] for j in range(RUN_FRAMES))):
                expected = ref[(start + i) % DISTINCT]
                outs = mapping.plan.model_outputs
                worst = max(worst, max_scaled_diff(out, expected, handed),
                            max_abs_diff([{k: out[k] for k in outs}], [{k: expected[k] for k in outs}]))
                checked += 1
            assert ex.metrics.frames == RUN_FRAMES
            rss.append(rss_bytes())
    assert checked == FRAMES
    assert worst <= 1e-5
    assert rss[-1] - rss[0] < RSS_GROWTH_BOUND_NBYTES, [r / 2**20 for r in rss]
