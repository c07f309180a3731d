"""The one rule for seeded random inputs (device_agents/ppexec/frames.py) and its users: the board's bundle run,
the host measurement, the agent's profile op."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ppexec.frames import FrameInput, draw_frames, inputs_from_doc

AGENT = Path(__file__).resolve().parents[1] / "device_agents" / "agent.py"


def test_the_rule_floats_normal_booleans_both_integers_in_their_range_else_zero():
    specs = [FrameInput("x", (400,), "float32"), FrameInput("mask", (400,), "bool"),
             FrameInput("ids", (400,), "int64", (3, 7)), FrameInput("n", (400,), "int32")]
    (frame,) = draw_frames(specs, 1, seed=5)
    assert frame["x"].dtype == np.float32 and abs(float(frame["x"].mean())) < 0.2 and 0.8 < frame["x"].std() < 1.2
    assert frame["mask"].dtype == np.bool_ and set(frame["mask"].tolist()) == {False, True}
    assert frame["ids"].dtype == np.int64 and set(frame["ids"].tolist()) == {3, 4, 5, 6, 7}
    assert frame["n"].dtype == np.int32 and not frame["n"].any()


def test_same_seed_same_frames_whatever_the_order_of_the_inputs():
    specs = [FrameInput("b", (2, 3), "float32"), FrameInput("a", (4,), "int64", (0, 9))]
    one, other = draw_frames(specs, 3, seed=1), draw_frames(specs[::-1], 3, seed=1)
    assert all(np.array_equal(f[k], g[k]) for f, g in zip(one, other) for k in ("a", "b"))
    assert not np.array_equal(one[0]["b"], one[1]["b"])  # frames differ from each other
    assert not np.array_equal(one[0]["b"], draw_frames(specs, 1, seed=2)[0]["b"])


def test_the_stream_is_numpys_legacy_one_fixed_across_versions():
    # inputs in name order, frame after frame, from one RandomState(seed): pinned, so boards with another numpy
    # draw these very values
    (frame,) = draw_frames([FrameInput("a", (2,), "int64", (0, 9)), FrameInput("b", (2,), "float64")], 1, seed=0)
    rng = np.random.RandomState(0)
    assert frame["a"].tolist() == rng.randint(0, 10, size=(2,)).tolist()
    assert frame["b"].tolist() == rng.standard_normal((2,)).tolist()
    assert frame["a"].tolist() == [5, 0]


def test_plan_json_inputs_become_frame_inputs():
    doc = {"ids": {"shape": [1, 4], "dtype": "int64", "range": [0, 29]}, "x": {"shape": [2]}}
    assert inputs_from_doc(doc) == [FrameInput("ids", (1, 4), "int64", (0, 29)), FrameInput("x", (2,), "float32")]


def test_the_agent_profiles_with_the_same_rule():
    spec = importlib.util.spec_from_file_location("agent_under_test", AGENT)
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    specs = [("x", [None, 3], "float32"), ("ids", [2], "int64"), ("m", [2], "bool")]
    feeds, shapes = agent._random_feeds(specs, {"x": {"shape": [2, 3]}}, seed=4)
    (expected,) = draw_frames([FrameInput("x", (2, 3), "float32"), FrameInput("ids", (2,), "int64"),
                               FrameInput("m", (2,), "bool")], 1, seed=4)
    assert sorted(feeds) == sorted(expected) and all(np.array_equal(feeds[k], expected[k]) for k in feeds)
    assert shapes == {"x": {"shape": [2, 3], "dtype": "float32"}, "ids": {"shape": [2], "dtype": "int64"},
                      "m": {"shape": [2], "dtype": "bool"}}
    with pytest.raises(agent.AgentError, match="is not supported"):
        agent._random_feeds([("s", [1], "complex64")], {}, seed=0)
