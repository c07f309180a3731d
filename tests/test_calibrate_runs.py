"""``parapipe calibrate --runs``: the pipeline-level terms and the powers fitted on measured runs (synthetic runs
drawn from known values plus noise, through the CLI end to end), the runs table as input, bad CSVs."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from parapipe.cli import main
from parapipe.cost.blocktable import read_block_table
from parapipe.mapping.index import parse_pu_list
from parapipe.cost.pipeline_terms import PipelineTerms
from parapipe.calibration.runfit import MeasuredRun
from parapipe.soc import load_soc

SOC = "amlogic_a311d"
PUS = ("big", "gpu", "little")
#: The "true" board: the GPU's two stages overlap 60 %, 0.4 ms per stage, 1 ms more per hand-off between PUs,
#: contention 0.8, 10 % slower work, 15 % more for a stage whose PU serves another stage.
TRUE = {"overlap.gpu": 0.6, "dispatch_s": 4e-4, "handoff_s": 1e-3, "contention": 0.8, "slowdown": 1.1,
        "sharing": 0.15}
#: True powers: active − idle per PU and Σ idle + static, W.
TRUE_DELTA_W = {"big": 3.0, "gpu": 1.0, "little": 0.8}
TRUE_BASE_W = 2.6
NOISE = 0.01  # 1 % log-normal measurement noise


def write_tables(folder: Path, rng: np.random.Generator, models=("m0", "m1", "m2"), n_blocks: int = 8) -> None:
    """Chains of ``n_blocks`` blocks (with one two-way branch) on big, gpu, little; the NPU runs nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    for model in models:
        rows = []
        for i in range(n_blocks):
            deps = "" if i == 0 else f"b{i - 1}" if i != 3 else "b1"  # b2 and b3 both follow b1
            deps = "b2;b3" if i == 4 else deps
            times = rng.uniform(2e-3, 12e-3, size=3)
            rows.append([f"b{i}", deps, int(rng.uniform(1e4, 4e5))] + [f"{t:.6g}" for t in times]
                        + [int(rng.uniform(2e6, 4e7))])
        with open(folder / f"{model}.blocks.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["block", "deps", "out_bytes"] + [f"t_{p}" for p in PUS] + ["dram_nbytes"])
            w.writerows(rows)


def true_terms(soc) -> PipelineTerms:
    return PipelineTerms(overlap={"gpu": TRUE["overlap.gpu"]}, dispatch_s=TRUE["dispatch_s"],
                         handoff_s=TRUE["handoff_s"], contention=TRUE["contention"], slowdown=TRUE["slowdown"],
                         sharing=TRUE["sharing"], memory_bandwidth_bytes_per_s=soc.memory_bandwidth_bytes_per_s,
                         # the profile's per-PU invocation costs are held as stated (calibrate does not fit them)
                         invoke_s=dict(soc.pipeline.invoke_s) if soc.pipeline is not None else {})


def parallel_stages(rng: np.random.Generator, n_blocks: int) -> list:
    """gpu | b1..b4 on {big, little} (the branch b2 / b3 on different PUs: tensors handed inside the stage) | gpu."""
    a, b = ("big", "little") if rng.random() < 0.5 else ("little", "big")
    mid = {"b1": a, "b2": a, "b3": b, "b4": a}
    return [{"pus": ["gpu"], "blocks": ["b0"], "assignment": {"b0": "gpu"}},
            {"pus": sorted({a, b}), "blocks": list(mid), "assignment": mid},
            {"pus": ["gpu"], "blocks": [f"b{i}" for i in range(5, n_blocks)],
             "assignment": {f"b{i}": "gpu" for i in range(5, n_blocks)}}]


def stage_list(pus: list) -> list:
    """The stages of a PU list as the runs table keeps them: each run of one PU is a stage."""
    stages = []
    for i, pu in enumerate(pus):
        if stages and stages[-1]["pus"] == [pu]:
            stages[-1]["blocks"].append(f"b{i}")
            stages[-1]["assignment"][f"b{i}"] = pu
        else:
            stages.append({"pus": [pu], "blocks": [f"b{i}"], "assignment": {f"b{i}": pu}})
    return stages


def draw_runs(folder: Path, rng: np.random.Generator, per_model: int = 16, models=("m0", "m1", "m2"),
              energy: bool = True, parallel: bool = False):
    """Rows ``model,soc,mapping,period_s,latency_s[,energy_j]`` measured on the "true" board, with noise; with
    ``parallel`` each row ends with its stage list (JSON), a quarter of them with a multi-PU stage.

    Mappings: random PU lists (PUs serving several stages), half of them with the GPU on both ends
    (GPU → other → GPU, the case the plain model gets worst)."""
    from parapipe.calibration.runs_calibrate import _stage_mapping

    soc = load_soc(SOC)
    terms = true_terms(soc)
    rows = []
    for model in models:
        problem = read_block_table(folder / f"{model}.blocks.csv", soc, name=model)
        for j in range(per_model):
            pus = [PUS[int(i)] for i in rng.integers(0, 3, size=problem.n_blocks)]
            if j % 2:
                pus[:2], pus[-2:] = ["gpu", "gpu"], ["gpu", "gpu"]
                pus[3] = pus[3] if pus[3] != "gpu" else "big"
            stages = None
            if parallel and j % 4 == 2:
                stages = parallel_stages(rng, problem.n_blocks)
                pus = [st["assignment"][b] for st in stages for b in st["blocks"]]
            text = ",".join(pus)
            mapping = _stage_mapping(problem, stages, text, "test") if stages else parse_pu_list(problem, text)
            run = MeasuredRun(model, text, problem, mapping, 1.0)
            period, latency, compute = run.facts.figures(terms)
            e = TRUE_BASE_W * period + sum(TRUE_DELTA_W[p] * compute[problem.pu_names.index(p)] for p in PUS)
            noisy = [v * float(np.exp(rng.normal(0.0, NOISE))) for v in (period, latency, e)]
            rows.append([model, SOC, text] + [f"{v:.9g}" for v in noisy[:2]] + ([f"{noisy[2]:.9g}"] if energy else [])
                        + ([json.dumps(stages or stage_list(pus))] if parallel else []))
    return rows


def write_export(path: Path, rows) -> Path:
    """Rows of :func:`draw_runs` (``parallel``, with energy) as ``parapipe runs --csv`` writes them."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "soc", "point", "pu_list", "mapping", "period_s", "idle_latency_s", "energy_j",
                    "prediction_applies", "outputs_match"])
        for i, (model, soc, text, period, latency, energy, stages) in enumerate(rows):
            w.writerow([model, soc, f"r{i}", text, stages, period, latency, energy, "True", "True"])
    return path


def write_runs(path: Path, rows, energy: bool = True, bom: bool = False, crlf: bool = False) -> Path:
    header = "model,soc,mapping,period_s,latency_s" + (",energy_j" if energy else "")
    lines = [header] + [",".join(f'"{c}"' if "," in str(c) else str(c) for c in r) for r in rows]
    text = ("\r\n" if crlf else "\n").join(lines) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return path


def calibrate_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_calibrate_runs_recovers_known_terms_and_powers_within_their_uncertainty(tmp_path, capsys):
    rng = np.random.default_rng(11)
    write_tables(tmp_path / "tables", rng)
    rows = draw_runs(tmp_path / "tables", rng, parallel=True)
    assert sum('"pus": ["big", "little"]' in r[-1] for r in rows) >= 10  # runs with a multi-PU stage
    runs = write_export(tmp_path / "runs.csv", rows)
    out = tmp_path / "cal.yaml"
    doc = calibrate_json(capsys, "--runs", str(runs), "--blocks", str(tmp_path / "tables"), "--out", str(out))
    params = {p["name"]: p for p in doc["params"]}
    for name, value in TRUE.items():
        p = params[name]
        assert p["fitted"] and p["stderr"] is not None, p
        assert p["stderr"] < 0.25 * value, p  # the data pin it down ...
        assert abs(p["value"] - value) <= 3 * p["stderr"], p  # ... and the truth is within 3 sigma
    for pu in ("big", "little"):  # their stages add up on the "true" board: 0 (on the bound) within 3 sigma
        assert params[f"overlap.{pu}"]["value"] <= 3 * params[f"overlap.{pu}"]["stderr"] + 0.01
    assert not params["overlap.npu"]["fitted"]  # runs nothing: no run constrains it
    for pu, value in TRUE_DELTA_W.items():
        p = params[f"power.delta_w.{pu}"]
        assert abs(p["value"] - value) <= 3 * p["stderr"] and p["stderr"] < 0.25 * value, p
    base = params["power.base_w"]
    assert abs(base["value"] - TRUE_BASE_W) <= 3 * base["stderr"], base
    err = doc["errors"]
    assert err["loo"]["period_mape"] < 2.5 and err["loo"]["latency_mape"] < 2.5 and err["loo"]["energy_mape"] < 2.5
    assert err["before"]["period_mape"] > 10 * err["loo"]["period_mape"]
    assert set(doc["per_model"]) == {"m0", "m1", "m2"}

    # a model without the terms (only a whole-run slowdown) fits worse
    plain = calibrate_json(capsys, "--runs", str(runs), "--blocks", str(tmp_path / "tables"), "--fit", "slowdown")
    assert plain["errors"]["before"] == err["before"]
    assert plain["errors"]["after"]["period_mape"] > 3 * err["after"]["period_mape"]
    assert plain["errors"]["loo"]["period_mape"] > 3 * err["loo"]["period_mape"]

    # the calibrated profile carries the terms with provenance, and evaluate predicts with them
    cal = load_soc(str(out))
    assert cal.pipeline.overlap["gpu"] == pytest.approx(params["overlap.gpu"]["value"])
    assert cal.provenance["pipeline.overlap.gpu"].source == "runs"
    assert cal.provenance["pipeline.contention"].source == "runs" and "calibrate --runs" in cal.sources["runs"]
    assert cal.pus["big"].active_power_w - cal.pus["big"].idle_power_w == \
        pytest.approx(params["power.delta_w.big"]["value"])
    first = rows[0]
    capsys.readouterr()
    assert main(["evaluate", "--blocks", str(tmp_path / "tables" / "m0.blocks.csv"), "--soc", str(out),
                 "--mapping", first[2], "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["period_s"] == pytest.approx(float(first[3]), rel=0.04)
    assert row["latency_s"] == pytest.approx(float(first[4]), rel=0.04)
    assert row["energy_j"] == pytest.approx(float(first[5]), rel=0.04)
    assert main(["evaluate", "--blocks", str(tmp_path / "tables" / "m0.blocks.csv"), "--soc", SOC,
                 "--mapping", first[2], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["period_s"] != pytest.approx(float(first[3]), rel=0.04)
    # the same runs as a long CSV (BOM, CRLF; PU lists: multi-PU stages cannot be written, so no hand-off term)
    single = [r[:6] for r in rows if '"pus": ["big", "little"]' not in r[-1]]
    long_doc = calibrate_json(capsys, "--runs", str(write_runs(tmp_path / "long.csv", single, bom=True, crlf=True)),
                              "--blocks", str(tmp_path / "tables"))
    long_params = {p["name"]: p for p in long_doc["params"]}
    assert not long_params["handoff_s"]["fitted"] and "multi-PU stage" in long_params["handoff_s"]["note"]
    for name in ("slowdown", "dispatch_s", "contention", "sharing", "overlap.gpu"):
        assert abs(long_params[name]["value"] - TRUE[name]) <= 3 * long_params[name]["stderr"], long_params[name]


def test_shared_pu_runs_calibrated_end_to_end_from_the_cli(tmp_path, capsys):
    """A CSV of measured runs whose stages share the GPU (no energies): imported, calibrated, printed."""
    rng = np.random.default_rng(5)
    write_tables(tmp_path / "tables", rng, models=("net",))
    rows = draw_runs(tmp_path / "tables", rng, per_model=12, models=("net",), energy=False)
    assert all(r[2].startswith("gpu,gpu") and r[2].endswith("gpu,gpu") for r in rows[1::2])
    runs = write_runs(tmp_path / "runs.csv", rows, energy=False)
    out = tmp_path / "sub" / "cal.yaml"
    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, "--runs", str(runs), "--blocks", str(tmp_path / "tables"),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "overlap.gpu" in text and "leave-one-out" in text and "energies stay estimates" in text
    assert f"wrote {out}" in text
    assert load_soc(str(out)).pipeline.overlap["gpu"] > 0.3


def test_runs_table_and_its_csv_export_are_inputs(tmp_path, capsys, caplog):
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import RunRecord, append_run, list_runs, write_runs_csv

    rng = np.random.default_rng(2)
    write_tables(tmp_path / "tables", rng, models=("m0",))
    rows = draw_runs(tmp_path / "tables", rng, per_model=10, models=("m0",))
    db_path = tmp_path / "p.sqlite"
    with ProfileDB(db_path) as db:
        for i, (model, soc, text, period, latency, energy) in enumerate(rows):
            pus = text.split(",")
            stages, start = [], 0
            for j in range(1, len(pus) + 1):
                if j == len(pus) or pus[j] != pus[start]:
                    blocks = [f"b{b}" for b in range(start, j)]
                    stages.append({"pus": [pus[start]], "blocks": blocks, "assignment": {b: pus[start] for b in blocks}})
                    start = j
            append_run(db, RunRecord(
                recorded_at="2025-01-01T00:00:00+00:00", model=model, model_sha256="x", soc=soc, soc_sha256="y",
                point=f"p{i}", pu_list=text, mapping=stages, frames=100, throughput_per_s=1 / float(period),
                period_s=float(period), latency_p50_s=float(latency) * 2, latency_p99_s=float(latency) * 3,
                idle_latency_s=float(latency), pu_busy_s={}, energy_j=float(energy), predicted_period_s=None,
                predicted_latency_s=None, predicted_energy_j=None, prediction_applies=i != 0, substituted={},
                outputs_match=True, runner="local", board={}))
        one = list_runs(db)[1]  # one model's row of a workload run whose other model's row is missing
        one.id, one.workload = None, {"id": "w1", "rates": {"m0": 1.0, "m1": 1.0}, "models": ["m0", "m1"]}
        one.period_s *= 3
        append_run(db, one)
        write_runs_csv(list_runs(db), tmp_path / "export.csv")
    from_db = calibrate_json(capsys, "--runs", "--db", str(db_path), "--blocks", str(tmp_path / "tables"))
    assert "workload run w1 (point p1: m0+m1) skipped: no row of model m1" in caplog.text
    caplog.clear()
    from_csv = calibrate_json(capsys, "--runs", str(tmp_path / "export.csv"), "--blocks", str(tmp_path / "tables"))
    assert "workload run w1 (point p1: m0+m1) skipped: no row of model m1" in caplog.text
    assert from_db["errors"]["after"]["n"] == 9  # the substituted run (prediction_applies false) is left out
    assert from_db["errors"] == from_csv["errors"]
    assert from_db["errors"]["loo"]["period_mape"] < from_db["errors"]["before"]["period_mape"]


@pytest.mark.parametrize("edit,match", [
    (lambda r: r.__setitem__(1, "jetson_agx_orin"), "line 2, column 'soc': run measured on SoC 'jetson_agx_orin'"),
    (lambda r: r.__setitem__(2, "gpu,gpu"), "line 2, column 'mapping': mapping has 2 entries"),
    (lambda r: r.__setitem__(2, r[2].replace("big", "npu", 1) if "big" in r[2] else "npu" + r[2][3:]),
     "cannot run block"),
    (lambda r: r.__setitem__(3, "-1"), "line 2, column 'period_s': period_s must be a finite number > 0"),
    (lambda r: r.__setitem__(0, "nosuch"), "no block table"),
])
def test_bad_runs_csv_is_one_line_naming_the_line(tmp_path, capsys, edit, match):
    rng = np.random.default_rng(1)
    write_tables(tmp_path / "tables", rng, models=("m0",))
    rows = draw_runs(tmp_path / "tables", rng, per_model=3, models=("m0",))
    edit(rows[0])
    runs = write_runs(tmp_path / "runs.csv", rows)
    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, "--runs", str(runs), "--blocks", str(tmp_path / "tables")]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1, err


def test_missing_column_and_no_runs(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,soc,mapping,period_s\nm0,amlogic_a311d,big,0.1\n")
    assert main(["calibrate", "--soc", SOC, "--runs", str(bad)]) == 2
    assert "column 'latency_s': missing" in capsys.readouterr().err
    assert main(["calibrate", "--soc", SOC, "--runs"]) == 2
    assert "--runs: no runs given" in capsys.readouterr().err
    assert main(["calibrate", "--soc", SOC, "--runs", str(bad), "--fit", "slowdown,nope"]) == 2
    assert "--fit: unknown term(s) nope" in capsys.readouterr().err


def test_replicated_runs_are_fitted_with_slowdown_and_dispatch(tmp_path):
    """Runs of mappings with replicated stages (``big|gpu``: a stage replicated over big and gpu) are calibrated,
    not skipped: drawn from κ = 1.1, d = 0.4 ms next to plain pipelines, the fit recovers both, and its
    replicated predictions are the cost model's under the fitted terms."""
    from parapipe.cost.evaluate import evaluate
    from parapipe.calibration.runfit import calibrate_runs

    rng = np.random.default_rng(11)
    write_tables(tmp_path, rng)
    soc = load_soc(SOC)
    truth = PipelineTerms(dispatch_s=4e-4, slowdown=1.1, memory_bandwidth_bytes_per_s=soc.memory_bandwidth_bytes_per_s)
    runs = []
    for model in ("m0", "m1", "m2"):
        problem = read_block_table(tmp_path / f"{model}.blocks.csv", soc, name=model)
        texts = ["big|gpu," * 4 + "little," * 3 + "little", "big|little," * 8, "gpu|little," * 5 + "big,big,big",
                 ",".join(["big"] * 4 + ["gpu"] * 4), ",".join(["little"] * 3 + ["gpu"] * 5)]
        for text in texts:
            mapping = parse_pu_list(problem, text.rstrip(","))
            ev = evaluate(problem, mapping, truth)
            runs.append(MeasuredRun(model, text, problem, mapping, ev.period_s * float(np.exp(rng.normal(0, 0.002))),
                                    ev.latency_s * float(np.exp(rng.normal(0, 0.002)))))
    assert sum(r.mapping.replicated for r in runs) == 9
    res = calibrate_runs(runs, PipelineTerms(memory_bandwidth_bytes_per_s=soc.memory_bandwidth_bytes_per_s),
                         fit=["slowdown", "dispatch"], soc=soc, loo=False)
    est = {p.name: p for p in res.params}
    for name, true in (("slowdown", 1.1), ("dispatch_s", 4e-4)):  # within 3 sigma of the fit's own uncertainty
        assert est[name].fitted and abs(est[name].value - true) <= 3 * est[name].stderr, (name, est[name])
    assert res.terms.slowdown == pytest.approx(1.1, rel=0.02) and res.terms.dispatch_s == pytest.approx(4e-4, rel=0.25)
    assert res.overall["after"].period_mape < 1.0 < res.overall["before"].period_mape


def test_one_run_fits_one_parameter_and_warns_enough_runs_fit_all(tmp_path, capsys):
    """With fewer runs than parameters the fit would be exact whatever the terms: at most one parameter per run is
    fitted (slowdown first), the rest keep the profile's values, and the output says so in a warning line."""
    rng = np.random.default_rng(3)
    write_tables(tmp_path / "tables", rng, models=("net",))
    rows = draw_runs(tmp_path / "tables", rng, per_model=12, models=("net",), energy=False)
    one = write_runs(tmp_path / "one.csv", rows[:1], energy=False)
    doc = calibrate_json(capsys, "--runs", str(one), "--blocks", str(tmp_path / "tables"))
    fitted = [p["name"] for p in doc["params"] if p["fitted"]]
    assert fitted == ["slowdown"]
    capped = [p for p in doc["params"] if not p["fitted"] and "run(s) support" in p["note"]]
    assert {p["name"] for p in capped} >= {"dispatch_s", "overlap.gpu"}
    assert len(doc["warnings"]) == 2 and "fitted only 1 (slowdown)" in doc["warnings"][0]
    assert "leave-one-out" in doc["warnings"][1] and "loo" not in doc["errors"]
    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, "--runs", str(one), "--blocks", str(tmp_path / "tables")]) == 0
    out = capsys.readouterr().out
    assert out.count("warning: ") == 2 and "1 run(s) for" in out and "record at least" in out

    many = write_runs(tmp_path / "many.csv", rows, energy=False)
    doc = calibrate_json(capsys, "--runs", str(many), "--blocks", str(tmp_path / "tables"))
    assert doc["warnings"] == []
    assert not any("run(s) support" in p["note"] for p in doc["params"])
    assert {"slowdown", "dispatch_s", "overlap.gpu"} <= {p["name"] for p in doc["params"] if p["fitted"]}


#: The "true" board of the workload test: no sharing or overlap, and a contention only co-running models show.
WL_TRUE = {"slowdown": 1.1, "dispatch_s": 4e-4, "contention": 0.8}


def run_record(model: str, point: str, pus: list, period: float, latency: float, workload=None):
    from parapipe.profiledb.runs import RunRecord

    return RunRecord(
        recorded_at="2025-01-01T00:00:00+00:00", model=model, model_sha256="x", soc=SOC, soc_sha256="y",
        point=point, pu_list=",".join(pus), mapping=stage_list(pus), frames=100, throughput_per_s=1 / period,
        period_s=period, latency_p50_s=latency * 2, latency_p99_s=latency * 3, idle_latency_s=latency, pu_busy_s={},
        energy_j=None, predicted_period_s=None, predicted_latency_s=None, predicted_energy_j=None,
        prediction_applies=True, substituted={}, outputs_match=True, runner="local", board={}, workload=workload)


def test_workload_runs_identify_the_contention_single_model_runs_cannot(tmp_path, capsys, caplog):
    """Single-model runs of whole models on one PU (no stages at once) say nothing of the memory contention γ;
    workload runs (two models on different PUs at once, measured periods drawn from the workload cost model
    with γ = 0.8 plus 1 % noise) do: calibrate --runs fits γ within 3σ of the truth from the database and from its
    CSV export, says that only the workload runs inform it, lists each workload run in the error tables, and
    skips a workload whose model has no block table with one line naming it."""
    from parapipe.cost.evaluate import evaluate
    from parapipe.cost.workload import evaluate_workload
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import append_run, list_runs, write_runs_csv

    rng = np.random.default_rng(23)
    tables = tmp_path / "tables"
    write_tables(tables, rng, models=("m0", "m1"))
    soc = load_soc(SOC)
    truth = PipelineTerms(memory_bandwidth_bytes_per_s=soc.memory_bandwidth_bytes_per_s, **WL_TRUE)
    problems = {m: read_block_table(tables / f"{m}.blocks.csv", soc, name=m) for m in ("m0", "m1")}

    def noisy(value: float) -> float:
        return value * float(np.exp(rng.normal(0.0, NOISE)))

    singles, workloads = [], []
    for model, problem in problems.items():
        for pu in PUS:
            pus = [pu] * problem.n_blocks
            ev = evaluate(problem, parse_pu_list(problem, ",".join(pus)), truth)
            singles.append(run_record(model, f"{model}-{pu}", pus, noisy(ev.period_s), noisy(ev.latency_s)))
    pairs = [("big", "gpu"), ("gpu", "little"), ("little", "big"), ("gpu", "big"), ("big", "little"),
             ("little", "gpu")]
    for i, ((pu0, pu1), rates) in enumerate(zip(pairs, [(1.0, 1.0), (2.0, 1.0), (1.0, 2.0)] * 2)):
        pus = {"m0": [pu0] * problems["m0"].n_blocks, "m1": [pu1] * problems["m1"].n_blocks}
        mappings = [parse_pu_list(problems[m], ",".join(pus[m])) for m in ("m0", "m1")]
        period = noisy(evaluate_workload([problems["m0"], problems["m1"]], mappings, rates, truth).period_s)
        workload = {"id": f"w{i}", "point": f"p{i}", "rates": {"m0": rates[0], "m1": rates[1]},
                    "models": ["m0", "m1"], "throughput_per_s": 1 / period, "predicted_period_s": None,
                    "energy_j": None, "pu_busy_s": {}}
        for m, rate, mp in zip(("m0", "m1"), rates, mappings):
            latency = noisy(evaluate(problems[m], mp, truth).latency_s)
            workloads.append(run_record(m, f"p{i}", pus[m], period / rate, latency, workload))
    # a workload run of a model without a block table: skipped, named
    lost = {"id": "wlost", "point": "q", "rates": {"m0": 1.0, "m9": 1.0}, "models": ["m0", "m9"],
            "throughput_per_s": 10.0}
    workloads += [run_record("m0", "q", ["big"] * 8, 0.1, 0.05, lost), run_record("m9", "q", ["gpu"] * 8, 0.1, 0.05,
                                                                                    lost)]
    single_db, both_db = tmp_path / "single.sqlite", tmp_path / "both.sqlite"
    with ProfileDB(single_db) as db:
        for rec in singles:
            append_run(db, rec)
    with ProfileDB(both_db) as db:
        for rec in workloads[:6] + singles + workloads[6:]:  # one workload's rows apart: grouped by their id
            append_run(db, rec)
        write_runs_csv(list_runs(db), tmp_path / "export.csv")
    fit = ("--fit", "slowdown,dispatch,contention", "--blocks", str(tables))

    alone = calibrate_json(capsys, "--runs", "--db", str(single_db), *fit)
    params = {p["name"]: p for p in alone["params"]}
    assert not params["contention"]["fitted"] and "no run has stages that run at once" in params["contention"]["note"]

    caplog.clear()
    doc = calibrate_json(capsys, "--runs", "--db", str(both_db), *fit)
    lines = [r.getMessage() for r in caplog.records if "wlost" in r.getMessage()]
    assert len(lines) == 1 and "m9" in lines[0] and "skipped" in lines[0], caplog.text
    params = {p["name"]: p for p in doc["params"]}
    gamma = params["contention"]
    assert gamma["fitted"] and gamma["stderr"] is not None and gamma["stderr"] < 0.25 * WL_TRUE["contention"], gamma
    assert abs(gamma["value"] - WL_TRUE["contention"]) <= 3 * gamma["stderr"], gamma
    assert gamma["workloads"] == "only" and params["slowdown"]["workloads"] == "also"
    for name in ("slowdown", "dispatch_s"):
        assert abs(params[name]["value"] - WL_TRUE[name]) <= 3 * params[name]["stderr"], params[name]
    assert doc["errors"]["after"]["n"] == 6 + 6  # six single-model runs, six workload runs (one run each)
    assert doc["per_model"]["workload m0+m1"]["loo"]["n"] == 6
    assert doc["per_model"]["workload m0+m1"]["loo"]["period_mape"] < 3.0
    assert doc["per_model"]["workload m0+m1"]["before"]["period_mape"] > 5.0

    # the export: rows of one workload come back grouped, the same fit
    from_csv = calibrate_json(capsys, "--runs", str(tmp_path / "export.csv"), *fit)
    assert from_csv["errors"] == doc["errors"] and from_csv["params"] == doc["params"]

    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, "--runs", "--db", str(both_db), *fit]) == 0
    out = capsys.readouterr().out
    assert "workload runs (6," in out and "contention (only they do)" in out
    assert "workload m0+m1 (6 runs)" in out


def test_a_workload_run_reads_alike_in_runs_and_calibrate(tmp_path, capsys):
    """One workload run (two models, m1 at rate 2): ``runs`` gives each model's error per inference against the
    workload's predicted period / its rate, and one line with the workload's error per workload frame;
    ``calibrate --runs`` fits the database and its CSV export alike, says "1 run", defines its errors, and the
    profile it writes calls the in-sample error in-sample, not leave-one-out."""
    from parapipe.cost.workload import evaluate_workload
    from parapipe.profiledb.db import ProfileDB
    from parapipe.profiledb.runs import append_run, list_runs, write_runs_csv

    rng = np.random.default_rng(7)
    tables = tmp_path / "tables"
    write_tables(tables, rng, models=("m0", "m1"))
    soc = load_soc(SOC)
    problems = {m: read_block_table(tables / f"{m}.blocks.csv", soc, name=m) for m in ("m0", "m1")}
    pus = {"m0": ["big"] * 8, "m1": ["gpu"] * 8}
    mappings = [parse_pu_list(problems[m], ",".join(pus[m])) for m in ("m0", "m1")]
    truth = PipelineTerms(memory_bandwidth_bytes_per_s=soc.memory_bandwidth_bytes_per_s, **WL_TRUE)
    period = evaluate_workload([problems["m0"], problems["m1"]], mappings, [1.0, 2.0], truth).period_s
    predicted = period / 1.25  # the recorded prediction: 20 % faster than measured
    workload = {"id": "w0", "point": "p0", "rates": {"m0": 1.0, "m1": 2.0}, "models": ["m0", "m1"],
                "throughput_per_s": 1 / period, "predicted_period_s": predicted, "energy_j": None, "pu_busy_s": {}}
    db_path = tmp_path / "p.sqlite"
    with ProfileDB(db_path) as db:
        for m, rate in (("m0", 1.0), ("m1", 2.0)):
            rec = run_record(m, "p0", pus[m], period / rate * 1.02, 0.01, workload)  # own period 2 % slower
            rec.predicted_period_s = predicted
            append_run(db, rec)
        write_runs_csv(list_runs(db), tmp_path / "export.csv")
    capsys.readouterr()
    assert main(["runs", "--db", str(db_path)]) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[2]: line.split() for line in out.splitlines()[1:3]}
    for m in ("m0", "m1"):  # predicted per inference: the workload's period / the rate, 1 / 1.25 / 1.02 - 1
        assert rows[m][7] == "-21.6", rows[m]
    assert "workload run w0 (rows 1, 2: m0+m1, point p0)" in out and "err -20.0 % per workload frame" in out
    assert "per workload frame / its rate" in err

    fit = ("--fit", "slowdown", "--blocks", str(tables))
    from_db = calibrate_json(capsys, "--runs", "--db", str(db_path), *fit)
    from_csv = calibrate_json(capsys, "--runs", str(tmp_path / "export.csv"), *fit)
    assert from_db["errors"] == from_csv["errors"] and from_db["params"] == from_csv["params"]
    out_yaml = tmp_path / "cal.yaml"
    capsys.readouterr()
    assert main(["calibrate", "--soc", SOC, "--runs", "--db", str(db_path), *fit, "--out", str(out_yaml)]) == 0
    out = capsys.readouterr().out
    assert "calibrate --runs: 1 run of workload m0+m1" in out and "workload m0+m1 (1 run)" in out
    assert "1 runs" not in out
    assert "MAPE = mean |error|" in out and "(predicted - measured) / measured" in out
    assert "period per workload frame" in out
    citation = load_soc(str(out_yaml)).sources["runs"]
    assert "1 measured run of" in citation and "in-sample period MAPE" in citation
    assert "leave-one-out period" not in citation


def test_host_models_are_costed_alike_on_one_database(tmp_path):
    """On ``host`` with a database, the whole model's stage-level time is stored and reused as block times are:
    two preparations of one model on one database give the same problem (``calibrate --runs`` from the database
    or from its CSV export with ``--db`` cost its runs alike)."""
    import onnx

    from conftest import make_chain_model
    from parapipe.app.prepare import prepare
    from parapipe.measure.local import local_soc

    model = tmp_path / "chain.onnx"
    onnx.save(make_chain_model(), str(model))
    soc = local_soc(n_cpus=1, transfer=(2e-5, 5e9))
    db = str(tmp_path / "p.sqlite")
    first = prepare(str(model), "host", db=db, host_soc=soc).problem
    second = prepare(str(model), "host", db=db, host_soc=soc).problem
    assert first.submodel_time_s and first.submodel_time_s == second.submodel_time_s
