"""The import-layer contract of parapipe/ and device_agents/ (ARCHITECTURE.md draws it; this file is its one
definition).

Every ``import`` and ``from ... import`` statement counts: at module level, inside functions, under
``if TYPE_CHECKING:`` and inside ``try``. A package's ``__init__.py`` is a module of its own (``parapipe.graph``).
Relative imports are resolved against the importing module's package. ``from pkg import name`` is an import of
``pkg.name`` when that is a module, else of ``pkg``; imports of modules outside the two trees are ignored.
Python's implicit import of every parent package is not counted (it holds for every import alike).

Checked:

* no import cycle among the modules (:func:`test_no_import_cycles`);
* every parapipe module belongs to a layer of :data:`LAYERS` and imports only from its own folder, from a lower
  layer, or ``ppexec`` when at or above :data:`PPEXEC_FROM` (:func:`test_imports_go_down_the_layers`); folders
  written ``a | b`` in one layer are independent of each other;
* ``ppexec`` (the board-side executor) and ``device_agents/agent.py`` never import parapipe, and ppexec never
  imports the agent (:func:`test_board_side_never_imports_parapipe`).

A violation reads ``module -> imported module (layer a above layer b), line N``. An allowed exception is an
entry of :data:`EXCEPTIONS` with the reason; an entry no import uses any more fails the test too.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent

#: The layers of parapipe, top to bottom: (name, folders or modules). A module may import from its own layer
#: and from any lower layer, except that folders written ``a | b`` in a layer's name are independent: neither
#: imports the other. A module belongs to the folder with the longest matching dotted prefix; the entry
#: ``parapipe`` is the top package's ``__init__`` alone.
LAYERS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("cli", ("parapipe.cli", "parapipe.__main__")),
    ("app", ("parapipe.app",)),
    ("report | deploy", ("parapipe.report", "parapipe.deploy")),
    ("measure", ("parapipe.measure",)),
    ("execution | calibration", ("parapipe.execution", "parapipe.calibration")),
    ("remote | profiledb", ("parapipe.remote", "parapipe.profiledb")),
    ("mapping", ("parapipe.mapping",)),
    ("search", ("parapipe.search",)),
    ("cost", ("parapipe.cost",)),
    ("soc | graph", ("parapipe.soc", "parapipe.graph")),
    ("errors, files, _paths", ("parapipe.errors", "parapipe.files", "parapipe._paths", "parapipe")),
)

#: The lowest layer that may import ``ppexec`` (the executor, shared with the boards): this one and those above.
PPEXEC_FROM = "execution | calibration"

#: Allowed imports against the layers: (importing module, imported module) -> why. Keep it short.
EXCEPTIONS: Dict[Tuple[str, str], str] = {
    ("parapipe.soc.profile", "parapipe.graph.support"):
        "PU.supports: a PU without supported_ops runs every operator of a standard ONNX domain; which domains are "
        "standard is defined once, in graph.support (graph never imports soc, so no circle)",
}

#: The module trees checked: (dotted prefix, folder). ``agent`` is the board agent script (top-level module).
TREES = (("parapipe", ROOT / "parapipe"), ("ppexec", ROOT / "device_agents" / "ppexec"),
         ("agent", ROOT / "device_agents" / "agent.py"))


class Import(NamedTuple):
    importer: str
    imported: str
    line: int


def _modules() -> Dict[str, Path]:
    """Dotted module name -> file, for every module of :data:`TREES` (a package is its ``__init__.py``)."""
    mods: Dict[str, Path] = {}
    for prefix, base in TREES:
        if base.is_file():
            mods[prefix] = base
            continue
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([prefix, *parts])] = path
    return mods


def _known(name: str, mods: Dict[str, Path]) -> Optional[str]:
    """The longest prefix of ``name`` that is a module of the trees, or None (a module outside them)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in mods:
            return candidate
        parts.pop()
    return None


def _imports(module: str, path: Path, mods: Dict[str, Path]) -> List[Import]:
    """Every import of a module of the trees in ``path``, resolved to module names."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: List[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in mods else source)
        for target in targets:
            known = _known(target, mods)
            if known is not None and known != module:
                out.append(Import(module, known, node.lineno))
    return out


def _all_imports() -> Tuple[Dict[str, Path], List[Import]]:
    mods = _modules()
    edges = [imp for name, path in mods.items() for imp in _imports(name, path, mods)]
    return mods, edges


def _folder(module: str) -> Optional[Tuple[int, str]]:
    """(layer index, folder) of a parapipe module, or None when no layer holds it."""
    best: Optional[Tuple[int, str]] = None
    for index, (_, folders) in enumerate(LAYERS):
        for folder in folders:
            inside = module == folder or (folder != "parapipe" and module.startswith(folder + "."))
            if inside and (
                    best is None or len(folder) > len(best[1])):
                best = (index, folder)
    return best


def layer_violations(edges: List[Import]) -> List[str]:
    """One line per import against :data:`LAYERS` (exceptions left out), sorted."""
    ppexec_from = [name for name, _ in LAYERS].index(PPEXEC_FROM)
    out = set()
    for imp in edges:
        if not imp.importer.startswith("parapipe") or (imp.importer, imp.imported) in EXCEPTIONS:
            continue
        src = _folder(imp.importer)
        if src is None:
            out.add(f"{imp.importer}: in no layer (add its folder to LAYERS in tests/test_layers.py)")
            continue
        if imp.imported.split(".")[0] in ("ppexec", "agent"):
            if src[0] > ppexec_from or imp.imported == "agent":
                out.add(f"{imp.importer} -> {imp.imported} (the board side is below layer {PPEXEC_FROM}, "
                        f"not {LAYERS[src[0]][0]}), line {imp.line}")
            continue
        dst = _folder(imp.imported)
        if dst is None:
            continue  # reported as the imported module's own "in no layer" line
        if dst[0] < src[0]:
            out.add(f"{imp.importer} -> {imp.imported} (layer {LAYERS[dst[0]][0]} above layer {LAYERS[src[0]][0]})"
                    f", line {imp.line}")
        elif dst[0] == src[0] and dst[1] != src[1] and "|" in LAYERS[src[0]][0]:
            out.add(f"{imp.importer} -> {imp.imported} ({src[1]} and {dst[1]} are independent folders of layer "
                    f"{LAYERS[src[0]][0]}), line {imp.line}")
    return sorted(out)


def test_no_import_cycles():
    _, edges = _all_imports()
    graph = nx.DiGraph()
    graph.add_edges_from((imp.importer, imp.imported) for imp in edges)
    cycles = []
    for scc in nx.strongly_connected_components(graph):
        if len(scc) > 1:
            cycle = nx.find_cycle(graph.subgraph(scc))
            cycles.append(" -> ".join([a for a, _ in cycle] + [cycle[0][0]]) + f"  (circle of {len(scc)} modules)")
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def test_imports_go_down_the_layers():
    _, edges = _all_imports()
    violations = layer_violations(edges)
    assert not violations, f"{len(violations)} imports against the layers:\n" + "\n".join(violations)


def test_board_side_never_imports_parapipe():
    _, edges = _all_imports()
    bad = sorted({f"{imp.importer} -> {imp.imported} (the board side runs without parapipe), line {imp.line}"
                  for imp in edges if imp.importer.split(".")[0] in ("ppexec", "agent")
                  and (imp.imported.startswith("parapipe") or (imp.importer != "agent" and imp.imported == "agent"))})
    assert not bad, "\n".join(bad)


def test_exceptions_are_used_and_explained():
    _, edges = _all_imports()
    used = {(imp.importer, imp.imported) for imp in edges}
    stale = [f"{a} -> {b}" for (a, b) in EXCEPTIONS if (a, b) not in used]
    unexplained = [f"{a} -> {b}" for (a, b), why in EXCEPTIONS.items() if not why.strip()]
    assert not stale, "EXCEPTIONS entries no import uses (remove them): " + ", ".join(stale)
    assert not unexplained, "EXCEPTIONS entries without a reason: " + ", ".join(unexplained)


def test_the_checker_sees_every_kind_of_import(tmp_path):
    """The resolver counts imports in functions, under TYPE_CHECKING and relative ones (a check of the check)."""
    pkg = tmp_path / "parapipe" / "soc"
    pkg.mkdir(parents=True)
    (tmp_path / "parapipe" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .loader import x\n")
    (pkg / "loader.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from parapipe.search import api\n"
        "def f():\n    from ..cost import evaluate\n    import parapipe.cli.main\n")
    for sub in ("search", "cost", "cli"):
        (tmp_path / "parapipe" / sub).mkdir()
        (tmp_path / "parapipe" / sub / "__init__.py").write_text("")
    (tmp_path / "parapipe" / "search" / "api.py").write_text("")
    (tmp_path / "parapipe" / "cost" / "evaluate.py").write_text("")
    (tmp_path / "parapipe" / "cli" / "main.py").write_text("")
    base = tmp_path / "parapipe"
    mods = {"parapipe" + "".join("." + p for p in path.relative_to(base).with_suffix("").parts
                                 if p != "__init__"): path for path in base.rglob("*.py")}
    found = {(i.importer, i.imported) for m, p in mods.items() for i in _imports(m, p, mods)}
    assert found == {("parapipe.soc", "parapipe.soc.loader"), ("parapipe.soc.loader", "parapipe.search.api"),
                     ("parapipe.soc.loader", "parapipe.cost.evaluate"), ("parapipe.soc.loader", "parapipe.cli.main")}
    lines = layer_violations([Import(a, b, 1) for a, b in found])
    assert lines == ["parapipe.soc.loader -> parapipe.cli.main (layer cli above layer soc | graph), line 1",
                     "parapipe.soc.loader -> parapipe.cost.evaluate (layer cost above layer soc | graph), line 1",
                     "parapipe.soc.loader -> parapipe.search.api (layer search above layer soc | graph), line 1"]
