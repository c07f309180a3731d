"""The typed pareto.json document: round trip, and hand edits refused with one line naming the point and field;
the board-facts check; dtype-aware output tolerances."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from deploy_mappings import two_stage_doc
from parapipe.errors import InputError
from parapipe.mapping import parse_pareto, read_pareto, select_point, write_pareto
from parapipe.execution.facts import check_board
from parapipe.execution.bindings import parse_binds
from parapipe.soc import load_soc
from parapipe.app.resolve import resolve_soc, soc_ref
from parapipe.soc.identity import soc_sha256
from ppexec.plan import PUBinding
from ppexec.reference import dtype_tolerance, within_tolerance


@pytest.fixture(scope="module")
def doc():
    return two_stage_doc("squeezenet", fractions=(0.3, 0.6))


def refused(data, *words):
    with pytest.raises(InputError) as info:
        parse_pareto(data, "m.json")
    msg = str(info.value)
    assert msg.startswith("m.json: ") and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def test_round_trip_keeps_every_field(doc, tmp_path):
    parsed = parse_pareto(doc, "m.json")
    write_pareto(parsed, tmp_path / "p.json")
    again = json.loads((tmp_path / "p.json").read_text())
    assert read_pareto(str(tmp_path / "p.json")) == parsed
    assert again["points"][1]["mapping"]["stages"][0]["blocks"] == doc["points"][1]["mapping"]["stages"][0]["blocks"]
    assert select_point(parsed, "best-throughput").id == "p0" and select_point(parsed, "p1").id == "p1"


def _edit(doc, fn):
    d = json.loads(json.dumps(doc))  # no shared lists (the writer's 'order' may alias 'blocks')
    fn(d["points"][1]["mapping"]["stages"], d)
    return d


def test_unknown_block(doc):
    refused(_edit(doc, lambda st, d: st[0]["blocks"].append("nope")), "points[p1].mapping.stages[0].blocks",
            "unknown block 'nope'")


def test_block_in_two_stages(doc):
    def dup(st, d):
        st[1]["blocks"].insert(0, st[0]["blocks"][-1])
        st[1]["assignment"][st[0]["blocks"][-1]] = "cpu1"
    refused(_edit(doc, dup), "points[p1].mapping.stages[1].blocks", "is already in stage 0")


def test_block_in_no_stage(doc):
    def drop(st, d):
        b = st[1]["blocks"].pop()
        st[1]["assignment"].pop(b)
        st[1]["order"] = [x for x in st[1]["order"] if x != b]
    refused(_edit(doc, drop), "points[p1].mapping.stages", "block(s) in no stage")


def test_block_on_a_pu_outside_its_stage(doc):
    def move(st, d):
        st[0]["assignment"][st[0]["blocks"][0]] = "cpu1"
    refused(_edit(doc, move), "points[p1].mapping.stages[0].assignment.", "PU 'cpu1' is not one of the stage's PUs")


def test_stages_out_of_order(doc):
    def swap(st, d):
        st[0], st[1] = st[1], st[0]
    refused(_edit(doc, swap), "points[p1].mapping.stages[1].blocks", "stages out of order")


def test_pu_not_in_the_profile(doc):
    def gpu(st, d):
        st[1]["pus"] = ["gpu"]
        st[1]["assignment"] = {b: "gpu" for b in st[1]["blocks"]}
    refused(_edit(doc, gpu), "points[p1].mapping.stages[1].pus", "PU 'gpu' is not in SoC 'host'")


def test_missing_field_and_old_schema(doc):
    d = copy.deepcopy(doc)
    del d["points"][0]["period_s"]
    refused(d, "points.0.period_s", "missing field")
    refused(dict(doc, schema_version=1), "schema_version: expected 2, got 1", "re-run 'parapipe optimize'")


def test_the_document_carries_the_profile_bindings_and_digest():
    soc = load_soc("jetson_agx_orin")
    ref = soc_ref(soc)
    assert ref.sha256 == soc_sha256(soc) == soc_sha256(resolve_soc("jetson_agx_orin"))
    assert ref.pus["dla1"].execution.provider_options["trt_dla_core"] == "1"
    assert soc_sha256(soc.restrict(["cpu", "gpu"])) != ref.sha256
    assert list(resolve_soc("amlogic_a311d", pus=["gpu", "npu"]).pus) == ["gpu", "npu"]


FACTS = {"cpus_allowed": [1], "providers": ["CPUExecutionProvider"], "onnxruntime_version": "1.19.2",
         "runtimes": {"onnxruntime": {"available": True}, "openvino": {"available": False,
                                                                       "reason": "not installed"}}}


@pytest.mark.parametrize("binding, words", [
    (PUBinding(cpus=(0,)), ["PU a: is pinned to CPUs [0] but the board allows 1", "--bind a=CPUS"]),
    (PUBinding(cpus=(1,), threads=2), ["PU a: runs 2 threads on 1 CPU(s) [1]", "threads <="]),
    (PUBinding(cpus=(1,), runtime="bst_dynamai"), ["needs runtime adapter 'bst_dynamai'", "onnxruntime, openvino"]),
    (PUBinding(cpus=(1,), runtime="openvino"), ["needs runtime 'openvino'", "not installed"]),
    (PUBinding(cpus=None, provider="CUDAExecutionProvider"),
     ["needs execution provider CUDAExecutionProvider", "onnxruntime 1.19.2 has CPUExecutionProvider"]),
], ids=["cpu-outside-affinity", "threads-over-cpus", "vendor-slot", "runtime-missing", "provider-missing"])
def test_board_facts_refuse_with_one_line(binding, words):
    with pytest.raises(InputError) as info:
        check_board({"a": binding}, FACTS, "me@board:22")
    msg = str(info.value)
    assert msg.startswith("me@board:22: PU a: ") and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    check_board({"a": PUBinding(cpus=(1,))}, FACTS, "me@board:22")  # what the board has passes


def test_bind_parsing():
    assert parse_binds(["big=0-3", "gpu=1", "npu=0,2,4-5"]) == {"big": (0, 1, 2, 3), "gpu": (1,),
                                                               "npu": (0, 2, 4, 5)}
    for bad, words in (("big", "is not PU=CPUS"), ("big=3-1", "runs backwards"), ("big=x", "not a CPU list")):
        with pytest.raises(InputError, match=words):
            parse_binds([bad])
    with pytest.raises(InputError, match="given twice"):
        parse_binds(["a=0", "a=1"])


def test_tolerance_depends_on_the_dtype():
    ref = np.linspace(-4, 4, 64).astype(np.float16)
    one_ulp = np.nextafter(ref, np.float16(np.inf))
    assert within_tolerance({"y": one_ulp}, {"y": ref}, ["y"], 1e-5, 1e-5)  # fp16: one ulp off matches
    assert not within_tolerance({"y": (ref + np.float16(0.25))}, {"y": ref}, ["y"], 1e-5, 1e-5)
    r32 = ref.astype(np.float32)
    assert not within_tolerance({"y": np.nextafter(r32, np.float32(np.inf)) + 1e-3}, {"y": r32}, ["y"], 1e-5, 1e-5)
    assert within_tolerance({"y": r32 * (1 + 5e-6)}, {"y": r32}, ["y"], 1e-5, 1e-5)
    ints = np.arange(5, dtype=np.int64)
    assert dtype_tolerance(np.int64, 1e-5, 1e-5) == (0.0, 0.0)
    assert not within_tolerance({"y": ints + 1}, {"y": ints}, ["y"], 1e-5, 1e-5)
    assert not within_tolerance({"y": r32.astype(np.float64)}, {"y": r32}, ["y"], 1e-5, 1e-5)  # dtype differs
