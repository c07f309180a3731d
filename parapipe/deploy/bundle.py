"""Deploy bundles: everything a board needs to run one mapping, with a manifest of SHA-256 digests.

A bundle is a folder (layout in ``device_agents/ppexec/bundle_run.py``): the agent and the executor core
(``device_agents/agent.py``, ``device_agents/ppexec/``), ``plan.json`` (the execution plan, the model's input
shapes, the predicted figures), one ``models/<task>.onnx`` per task (for a PU of runtime ncnn the converted
``models/<task>.ncnn.param`` and ``.ncnn.bin`` with their manifest ``models/<task>.ncnn.json``),
``reference.onnx`` (the unsplit model,
for the output check on the board) and ``manifest.json`` listing every other file with its SHA-256 and size.
The bundle id is a digest of the manifest's content, so the same mapping of the same model always gives the
same id: an interrupted upload resumes into the same remote folder.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import onnx

from ppexec import bundle_run
from ppexec.plan import plan_from_doc, plan_to_doc
from ppexec.reference import handed_over_tensors

from parapipe import __version__
from parapipe._paths import data_dir
from parapipe.errors import input_error
from parapipe.execution.reference import reference_for_check

log = logging.getLogger(__name__)

MANIFEST = bundle_run.MANIFEST
PLAN = bundle_run.PLAN
#: A workload bundle's list of models and rates (:mod:`ppexec.workload_run`).
WORKLOAD = "workload.json"
REFERENCE = "reference.onnx"
#: Input frames given with ``--feeds``, as ``<frame>/<input>`` arrays (``ppexec.bundle_run.load_bundle_feeds``).
FEEDS = "feeds.npz"
BUNDLE_PREFIX = bundle_run.BUNDLE_PREFIX
#: Version of manifest.json.
MANIFEST_SCHEMA_VERSION = 1
#: Hex digits of the bundle id (64 bits: collisions between bundles on one board are not a concern).
BUNDLE_ID_HEX = 16


@dataclass
class Bundle:
    """A bundle written to a local folder.

    Attributes
    ----------
    folder : Path
        Where its files are.
    bundle_id : str
        ``BUNDLE_ID_HEX`` hex digits of the SHA-256 of the manifest's content.
    manifest : dict
        ``{"schema_version", "bundle_id", "created_by", "model", "point", "files": {path: {"sha256",
        "nbytes"}}}``; paths are relative and ``/``-separated.
    """

    folder: Path
    bundle_id: str
    manifest: Dict[str, Any]

    @property
    def name(self) -> str:
        """Folder name of the bundle on a host: ``bundle-<id>``."""
        return f"{BUNDLE_PREFIX}{self.bundle_id}"

    def bindings(self) -> Dict[str, Any]:
        """The plan's PU bindings (:class:`ppexec.plan.PUBinding` by PU), read back from ``plan.json``; of a
        workload bundle, every model's plan's (a PU shared by several models is bound the same in each)."""
        workload = self.folder / WORKLOAD
        if workload.is_file():
            out: Dict[str, Any] = {}
            for name in json.loads(workload.read_text())["models"]:
                sub = self.folder / _safe_name(name)
                doc = json.loads((sub / PLAN).read_text())
                out.update(plan_from_doc(doc, str(sub), PLAN).bindings)
            return out
        doc = json.loads((self.folder / PLAN).read_text())
        return plan_from_doc(doc, str(self.folder), PLAN).bindings

    @property
    def nbytes(self) -> int:
        """Total size of the files listed in the manifest."""
        return sum(entry["nbytes"] for entry in self.manifest["files"].values())


def _sha256(path: Path) -> str:
    return bundle_run.sha256_file(str(path))


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _write_model(model: Any, path: Path, task: str) -> None:
    if not isinstance(model, onnx.ModelProto):
        raise input_error("mapping", f"task {task}", f"model is a {type(model).__name__}, not an ONNX model",
                          "build the plan with parapipe.execution.build_plan")
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise input_error("mapping", f"task {task}",
                              f"weight {tensor.name!r} lives in an external data file",
                              "load the model's external data into memory before deploying")
    path.write_bytes(model.SerializeToString())


def _write_ncnn(manifest_path: str, models: Path, stem: str) -> str:
    """Copy a task's converted ncnn model (:mod:`parapipe.execution.ncnn_convert`) into ``models`` as
    ``<stem>.ncnn.param``, ``<stem>.ncnn.bin`` and its manifest ``<stem>.ncnn.json``; the manifest's name."""
    from ppexec.ncnn_runtime import read_manifest

    doc = read_manifest(manifest_path)
    names = {"param": f"{stem}.ncnn.param", "bin": f"{stem}.ncnn.bin"}
    for key, name in names.items():
        shutil.copyfile(doc[key], models / name)
    (models / f"{stem}.ncnn.json").write_text(json.dumps({**doc, **names}, indent=1, sort_keys=True) + "\n")
    return f"{stem}.ncnn.json"


def _copy_runtime(dest: Path) -> None:
    """Copy the agent and the executor core (``.py`` files only) into ``dest``."""
    agents = data_dir("device_agents")
    shutil.copyfile(agents / "agent.py", dest / "agent.py")
    (dest / "ppexec").mkdir()
    for source in sorted((agents / "ppexec").glob("*.py")):
        shutil.copyfile(source, dest / "ppexec" / source.name)


def build_bundle(mapping: Any, dest: Path) -> Bundle:
    """Write the bundle of ``mapping`` into the empty or new folder ``dest``.

    Parameters
    ----------
    mapping : parapipe.app.run.LoadedMapping
        From :func:`parapipe.app.run.load_mapping` (its plan's task models may be edited before, e.g.
        by tests).
    dest : Path
        Folder to write (created; must be empty if it exists).

    Returns
    -------
    Bundle

    Raises
    ------
    InputError
        A task model with external data, or ``dest`` not empty.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise input_error(str(dest), None, "the bundle folder is not empty", "pass an empty or new folder")
    _copy_runtime(dest)
    plan_doc = _write_model_part(mapping, dest)
    return _seal(dest, plan_doc["model"], plan_doc["point"])


def build_workload_bundle(mappings: Dict[str, Any], rates: Dict[str, float], point: str,
                          predicted: Dict[str, Any], dest: Path) -> Bundle:
    """Write the bundle of a workload point into the empty or new folder ``dest``: the agent and ppexec once,
    each model's part (as :func:`build_bundle` writes one model's) in the sub-folder of its name, and
    ``workload.json`` (``{"models": [names], "rates", "point", "predicted", "power_sensor"}``), which the board's
    :func:`ppexec.workload_run.run_workload_bundle` reads.

    Parameters
    ----------
    mappings : dict of str to parapipe.app.run.LoadedMapping
        Model name (in the workload) -> its part of the point, plan built.
    rates : dict of str to float
        Frames of each model per workload frame.
    point : str
        The workload point's id.
    predicted : dict
        The workload's predicted figures.
    dest : Path

    Raises
    ------
    InputError
        A task model with external data, ``dest`` not empty, two model names that give one folder name.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise input_error(str(dest), None, "the bundle folder is not empty", "pass an empty or new folder")
    folders = {_safe_name(name) for name in mappings}
    if len(folders) != len(mappings) or folders & {"ppexec", "models", "out"}:
        raise input_error("workload", "models", f"model names {sorted(mappings)} do not give one folder each",
                          "give the models names that differ in letters, digits, '.', '_' or '-'")
    _copy_runtime(dest)
    models = []
    for name, mapping in mappings.items():
        (dest / _safe_name(name)).mkdir()
        plan_doc = _write_model_part(mapping, dest / _safe_name(name))
        models.append(plan_doc["model"])
    first = next(iter(mappings.values()))
    doc = {"models": list(mappings), "rates": {m: float(rates[m]) for m in mappings}, "point": point,
           "predicted": dict(predicted), "power_sensor": first.doc.soc.power_sensor,
           "folders": {m: _safe_name(m) for m in mappings}}
    (dest / WORKLOAD).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return _seal(dest, {"workload": list(mappings), "models": models}, point)


def _write_model_part(mapping: Any, dest: Path) -> Dict[str, Any]:
    """Write one model's part of a bundle into ``dest`` (its ``models/``, ``reference.onnx``, ``plan.json`` and
    ``feeds.npz``); return the plan.json document."""
    (dest / "models").mkdir()
    model_files: Dict[str, str] = {}
    for tasks in mapping.plan.stages:
        for task in tasks:
            ncnn = isinstance(task.model, str) and task.model.endswith(".ncnn.json")  # runtime ncnn
            rel = f"models/{_safe_name(task.name)}" + (".ncnn.json" if ncnn else ".onnx")
            if rel in model_files.values():
                raise input_error("mapping", f"task {task.name}", "two tasks map to the same file name",
                                  "give tasks names that differ in letters, digits, '.', '_' or '-'")
            if ncnn:
                _write_ncnn(task.model, dest / "models", _safe_name(task.name))
            else:
                _write_model(task.model, dest / rel, task.name)
            model_files[task.name] = rel
    og = mapping.opgraph
    reference, checked, softmax = reference_for_check(mapping.loaded.model, og, handed_over_tensors(mapping.plan))
    _write_model(reference, dest / REFERENCE, "reference")
    plan_doc = plan_to_doc(mapping.plan, model_files)
    from parapipe.graph.feeds import integer_input_ranges, shape_input_values

    ranges = integer_input_ranges(og)  # valid integer values (embedding rows ...), for the frames on the board
    fixed = {n: v for n, v in shape_input_values(og).items() if v is not None}  # inputs that are shapes
    plan_doc.update({
        "inputs": {n: {"shape": [int(d) for d in og.tensors[n].shape], "dtype": str(og.tensors[n].dtype),
                       **({"range": list(ranges[n])} if n in ranges else {}),
                       **({"value": list(fixed[n])} if n in fixed else {})}
                   for n in mapping.plan.model_inputs},
        "check_tensors": checked,
        "softmax_inputs": {out: list(src) for out, src in softmax.items()},
        "reference_model": REFERENCE,
        "predicted": mapping.predicted(),
        "power_sensor": mapping.doc.soc.power_sensor,  # measured energy per inference where the board has one
        # operating points set for the run and restored after it (ppexec.dvfs), with each PU's domain
        **({"frequencies_hz": dict(mapping.frequencies_hz), "frequency_domains": dict(mapping.frequency_domains),
            "frequencies_required": bool(mapping.frequencies_required)}
           if mapping.frequencies_hz else {}),
        "substituted": {pu: list(cpus) for pu, cpus in mapping.substituted.items()},
        "soc": {"name": mapping.doc.soc.name, "sha256": mapping.doc.soc.sha256},
        "model": mapping.model_id(),
        "point": mapping.point.id,
    })
    if mapping.feeds:
        from parapipe.graph.feeds import load_feeds

        frames = load_feeds(mapping.feeds, og)  # checked against the graph (names, shapes, dtypes, ranges)
        import numpy as np

        arrays: Dict[str, Any] = {f"{i}/{name}": value for i, frame in enumerate(frames)
                                  for name, value in frame.items()}
        np.savez(dest / FEEDS, **arrays)
        plan_doc["feeds"] = FEEDS
    (dest / PLAN).write_text(json.dumps(plan_doc, indent=1, sort_keys=True) + "\n")
    return plan_doc


def _seal(dest: Path, model: Any, point: str) -> Bundle:
    """Write the manifest of every file under ``dest`` and return the bundle."""
    files: Dict[str, Dict[str, Any]] = {}
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        rel = path.relative_to(dest).as_posix()
        files[rel] = {"sha256": _sha256(path), "nbytes": path.stat().st_size}
    content = {"model": model, "point": point, "files": files}
    bundle_id = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:BUNDLE_ID_HEX]
    manifest = {"schema_version": MANIFEST_SCHEMA_VERSION, "bundle_id": bundle_id,
                "created_by": f"parapipe {__version__}", **content}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    log.info("bundle %s: %d files, %.1f MB", bundle_id, len(files),
             sum(f["nbytes"] for f in files.values()) / 1e6)
    return Bundle(dest, bundle_id, manifest)
