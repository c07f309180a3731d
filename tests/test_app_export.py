"""Where each operator runs: ``parapipe plot --graph`` draws a point's block graph and ``parapipe export`` writes
the model with every node annotated (``metadata_props``), read back with onnx and compared with the point."""
from __future__ import annotations

import pytest
import onnx

from parapipe.app.export import KEY_BLOCK, KEY_PU, KEY_REPLICAS, KEY_STAGE, block_placements, load_mapped
from parapipe.cli import main
from parapipe.mapping import read_pareto, select_point
from parapipe.report.graph import graph_layout

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def a311d(tmp_path_factory):
    out = tmp_path_factory.mktemp("inc_a311d")
    assert main(["optimize", "inception_v1", "--soc", "amlogic_a311d", "--out", str(out), "--no-plot",
                 "--time-limit", "5"]) == 0
    return out / "pareto.json"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    out = tmp_path_factory.mktemp("inc_host")
    assert main(["optimize", "inception_v1", "--soc", "host", "--pus", "cpu0,cpu1", "--out", str(out),
                 "--no-plot", "--time-limit", "2"]) == 0
    return out / "pareto.json"


def _props(node):
    return {e.key: e.value for e in node.metadata_props}


def _check_graph(pareto, point, tmp_path):
    out = tmp_path / "graph.png"
    assert main(["plot", "--graph", "--mapping", str(pareto), "--point", point, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in tmp_path.iterdir()] == ["graph.png"]  # no temporary left
    mapped = load_mapped(None, str(pareto), point)
    nodes = graph_layout(mapped.point, mapped.blocks)
    assert sorted(n.block for n in nodes) == sorted(b.name for b in mapped.blocks.blocks)
    # stages left to right, one column range each; every edge goes left to right
    cols = {}
    for n in nodes:
        cols.setdefault(n.stage, []).append(n.x)
    spans = [(min(v), max(v)) for _, v in sorted(cols.items())]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    at = {n.block: n for n in nodes}
    assert all(at[u].x < at[v].x for u, v in mapped.blocks.graph.edges)
    assert len({(n.x, n.y) for n in nodes}) == len(nodes)  # no two boxes in one place


def _check_export(pareto, point, tmp_path, capsys):
    out = tmp_path / "mapped.onnx"
    capsys.readouterr()
    assert main(["export", "--mapping", str(pareto), "--point", point, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out}: point ") and "nodes annotated" in said
    assert [p.name for p in tmp_path.iterdir()] == ["mapped.onnx"]
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    pt = select_point(read_pareto(str(pareto)), point)
    mapped = load_mapped(None, str(pareto), point)
    where = block_placements(pt)
    placed = 0
    for node in model.graph.node:
        props = _props(node)
        if KEY_STAGE not in props:
            assert "parapipe.note" in props  # folded into a constant when loading
            continue
        placed += 1
        block = props[KEY_BLOCK]
        stage = pt.stages[int(props[KEY_STAGE])]
        assert block in stage.blocks
        assert props[KEY_PU].split(",") == list(dict.fromkeys(r.pu_of(block) for r in stage.replica_stages()))
        assert (KEY_REPLICAS in props) == where[block].replicated
        # the node is one of the block's operators (by name, or by the output it computes)
        ops = mapped.blocks.block(block).ops
        assert node.name in ops or any(t in mapped.opgraph.op(o).outputs for o in ops for t in node.output)
    # every operator of the normalised graph is covered by some annotated node
    assert placed >= len(mapped.blocks.blocks)
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta["parapipe.point"].startswith(f"{pt.id} ({pt.strategy})")
    return model


def test_graph_and_export_of_an_a311d_point(a311d, tmp_path, capsys):
    (tmp_path / "g").mkdir()
    _check_graph(a311d, "best-throughput", tmp_path / "g")
    (tmp_path / "e").mkdir()
    _check_export(a311d, "best-throughput", tmp_path / "e", capsys)


def test_export_of_a_replicated_point_names_the_replicas(a311d, tmp_path, capsys):
    doc = read_pareto(str(a311d))
    rep = next(p for p in doc.points if p.strategy == "replicated")
    model = _check_export(a311d, rep.id, tmp_path, capsys)
    props = next(_props(n) for n in model.graph.node if KEY_STAGE in _props(n))
    assert "% of frames" in props[KEY_REPLICAS] and "," in props[KEY_PU]


@pytest.mark.slow
def test_graph_and_export_of_a_host_point(host, tmp_path, capsys):
    (tmp_path / "g").mkdir()
    _check_graph(host, "best-throughput", tmp_path / "g")
    (tmp_path / "e").mkdir()
    _check_export(host, "best-throughput", tmp_path / "e", capsys)


@pytest.mark.parametrize("argv, message", [
    (["export", "--mapping", "{pareto}", "--point", "nope", "--out", "x.onnx"], "no point 'nope'"),
    (["plot", "--graph", "--mapping", "{pareto}", "--point", "nope", "--out", "x.png"], "no point 'nope'"),
    (["plot", "--graph", "--out", "x.png"], "--mapping: is required with --graph"),
    (["plot", "--graph", "--gantt", "--mapping", "{pareto}", "--out", "x.png"], "exactly one of"),
    (["export", "squeezenet", "--mapping", "{pareto}", "--out", "x.onnx"], "mapping was computed for model"),
    (["export", "--mapping", "{pareto}", "--out", "{tmp}/no/such/x.onnx"], "its folder does not exist"),
    (["plot", "--graph", "--mapping", "{pareto}", "--out", "{tmp}/no/such/x.png"], "its folder does not exist"),
])
def test_bad_requests_are_one_line_errors(a311d, tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(pareto=a311d, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
