"""Host-side compile step of the ``ncnn`` runtime: ONNX sub-models converted to ncnn models with pnnx.

ncnn (the board's runtime, :mod:`ppexec.ncnn_runtime`) cannot read ONNX. :func:`convert` turns one static-shape
sub-model into ``model.ncnn.param`` / ``model.ncnn.bin`` with pnnx and writes the manifest ``model.ncnn.json``
(ONNX input and output names in order against ncnn's ``in0…`` / ``out0…``, shapes, the converter's version).
pnnx is the standalone executable inside the ``pnnx`` wheel (``pip install --no-deps pnnx``: the wheel declares
torch, and ``import pnnx`` imports it, but the executable needs neither); :func:`pnnx_executable` finds it
without importing the package (``$PARAPIPE_PNNX`` names another). Weights stay fp32 (``fp16=0``): the PU's
precision is chosen when the board loads the model (``runtime_options.precision``).

Each conversion is checked before it is trusted: ncnn (when installed here) runs the converted model and ONNX
Runtime the sub-model on the same seeded inputs, and every output must agree within
:data:`ppexec.bundle_run.CROSS_RUNTIME_RTOL` of its largest value (a conversion can succeed and compute
something else). Results are cached by the sub-model's SHA-256 (and pnnx's version) under
``$XDG_CACHE_HOME/parapipe/ncnn`` (``~/.cache`` when unset).

:func:`compile_plan` gives every task of a PU bound to runtime ``ncnn`` its converted model (the manifest's
path), so ``run`` and ``deploy`` (:mod:`parapipe.deploy.bundle` ships the three files) run what was converted;
:func:`pack` zips one for the agent's ``profile`` op.
"""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx

from ppexec.bundle_run import CROSS_RUNTIME_RTOL
from ppexec.ncnn_runtime import MANIFEST_FORMAT, MANIFEST_SCHEMA_VERSION, PACK_MANIFEST, read_manifest
from ppexec.plan import ExecutionPlan

from parapipe.errors import InputError

__all__ = ["NCNN_RUNTIME", "PNNX_ENV", "PNNX_TIMEOUT_S", "NcnnConversionError", "pnnx_executable",
           "pnnx_version", "cache_dir", "convert", "pack", "compile_plan"]

log = logging.getLogger(__name__)

#: The runtime name of ncnn PUs (``execution.runtime``).
NCNN_RUNTIME = "ncnn"
#: Environment variable naming the pnnx executable (default: the one inside the installed ``pnnx`` wheel).
PNNX_ENV = "PARAPIPE_PNNX"
#: Longest one conversion may take, s (a parapipe choice: resnet50 whole converts in a few seconds here).
PNNX_TIMEOUT_S = 600.0
#: Absolute tolerance of the conversion check, on top of the relative one (float32 rounding of values near 0).
_ATOL = 1e-5
_UNSUPPORTED = re.compile(r"(?:unsupported|not supported|unknown)[^\n]*?\b([A-Z][A-Za-z0-9]+)\b")
_FLOAT32 = onnx.TensorProto.FLOAT
#: How pnnx's generated ``m_ncnn.py`` feeds each input: ``batch_index=0`` (dim 0 is the batch axis, dropped) or
#: ``233`` (pnnx found no batch axis: the whole tensor is the Mat).
_FEED = re.compile(r'ex\.input\("in(\d+)", ncnn\.Mat\(in\d+\.numpy\(\), batch_index=(\d+)\)')


class NcnnConversionError(InputError):
    """A sub-model pnnx cannot convert, or whose conversion computes something else (one-line message)."""


def pnnx_executable() -> str:
    """Path of the pnnx executable: ``$PARAPIPE_PNNX``, else ``pnnx/pnnx`` inside the installed wheel.

    Raises
    ------
    NcnnConversionError
        Neither exists (the message says how to install it).
    """
    named = os.environ.get(PNNX_ENV, "").strip()
    if named:
        if not os.access(named, os.X_OK):
            raise NcnnConversionError(f"${PNNX_ENV}: {named!r} is not an executable file; point it at pnnx")
        return named
    spec = importlib.util.find_spec("pnnx")  # finds the package without importing it (its __init__ needs torch)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        exe = os.path.join(folder, "pnnx")
        if os.access(exe, os.X_OK):
            return exe
    raise NcnnConversionError("runtime ncnn: the pnnx converter is not installed; pip install --no-deps pnnx "
                              f"(its executable needs no torch), or set ${PNNX_ENV} to a pnnx executable")


def pnnx_version() -> str:
    """The installed pnnx's version (the wheel's metadata; ``"unknown"`` for an executable named by
    ``$PARAPIPE_PNNX``)."""
    if os.environ.get(PNNX_ENV, "").strip():
        return "unknown"
    import importlib.metadata

    try:
        return importlib.metadata.version("pnnx")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/parapipe/ncnn`` (``~/.cache/parapipe/ncnn`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parapipe" / "ncnn"


def _static_shape(vi: onnx.ValueInfoProto) -> Optional[List[int]]:
    dims = vi.type.tensor_type.shape.dim
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    shape = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in dims]
    return shape if all(d > 0 for d in shape) else None


def _io_specs(model: onnx.ModelProto, source: str) -> tuple:
    """``(inputs, outputs)``: ``[(name, shape)]`` of the graph's float32 batch-1 static tensors.

    Raises NcnnConversionError for another dtype, a dynamic shape or a batch other than 1."""
    specs = []
    for kind, values, prefix in (("input", model.graph.input, "in"), ("output", model.graph.output, "out")):
        rows = []
        for vi in values:
            shape = _static_shape(vi)
            if vi.type.tensor_type.elem_type != _FLOAT32:
                raise NcnnConversionError(f"{source}: {kind} {vi.name!r}: ncnn takes float32 tensors only, got "
                                          f"{onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)}; "
                                          "run this part on a PU of another runtime")
            if shape is None or shape[0] != 1 or len(shape) > 5:
                raise NcnnConversionError(f"{source}: {kind} {vi.name!r}: ncnn needs a static batch-1 shape of "
                                          "at most 5 dims (it has no batch axis), got "
                                          f"{shape or 'a dynamic shape'}; fix the input shapes (--input-shape)")
            rows.append((vi.name, shape))
        specs.append(rows)
    return specs[0], specs[1]


def _culprit(text: str, model: onnx.ModelProto) -> str:
    ops = {n.op_type for n in model.graph.node}
    named = [m for m in _UNSUPPORTED.findall(text) if m in ops]
    return f"operator {named[0]}" if named else f"operators {', '.join(sorted(ops))}"


def _run_pnnx(model: onnx.ModelProto, inputs: list, folder: Path, source: str) -> None:
    exe = pnnx_executable()
    if model.ir_version < 4:  # pnnx refuses IR-3 models (their initializers are listed as graph inputs)
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = 4
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    shapes = ",".join("[%s]f32" % ",".join(str(d) for d in shape) for _, shape in inputs)
    cmd = [exe, "m.onnx", f"inputshape={shapes}", "fp16=0"]
    try:
        done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, errors="replace",
                              timeout=PNNX_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NcnnConversionError(f"{source}: pnnx did not finish within {PNNX_TIMEOUT_S:.0f} s; "
                                  "run this part on a PU of another runtime") from None
    out = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0 or not (folder / "m.ncnn.param").is_file() or not (folder / "m.ncnn.bin").is_file():
        last = " ".join(out.strip().splitlines()[-1:]) if out.strip() else f"exit code {done.returncode}"
        raise NcnnConversionError(f"{source}: pnnx cannot convert {_culprit(out, model)} ({last.strip()[:200]}); "
                                  "run this part on a PU of another runtime")


def _batch_axes(folder: Path, n_inputs: int) -> List[bool]:
    """Per input, whether pnnx took dim 0 as the batch axis (read from the ``m_ncnn.py`` it writes; an input
    it does not mention keeps the batch axis)."""
    text = (folder / "m_ncnn.py").read_text(errors="replace") if (folder / "m_ncnn.py").is_file() else ""
    found = {int(k): int(b) == 0 for k, b in _FEED.findall(text)}
    return [found.get(k, True) for k in range(n_inputs)]


def _check_outputs(model: onnx.ModelProto, param: Path, binfile: Path, inputs: list, outputs: list,
                   batch: List[bool], source: str) -> None:
    """Run the converted model with ncnn and the sub-model with ONNX Runtime on seeded inputs; raise
    NcnnConversionError unless every output agrees. Skipped (logged) when ncnn is not installed here."""
    try:
        import ncnn
    except ImportError:
        log.info("%s: ncnn is not installed here; the conversion is not checked against ONNX Runtime", source)
        return
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        [n for n, _ in outputs], feeds)
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    net.opt.num_threads = 1
    for flag in ("use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic", "use_bf16_storage"):
        setattr(net.opt, flag, False)
    if net.load_param(str(param)) != 0 or net.load_model(str(binfile)) != 0:
        raise NcnnConversionError(f"{source}: ncnn {getattr(ncnn, '__version__', '')} cannot load what pnnx "
                                  f"wrote ({_culprit('', model)}); run this part on a PU of another runtime")
    ex = net.create_extractor()
    for k, (name, _) in enumerate(inputs):
        x = feeds[name][0] if batch[k] else feeds[name]
        if x.ndim > 4:  # ncnn Mats have at most 4 dims (w, h, d, c)
            raise NcnnConversionError(f"{source}: input {name!r} would be a {x.ndim}-dim ncnn Mat (pnnx found "
                                      "no batch axis to drop; ncnn takes at most 4 dims); run this part on a PU "
                                      "of another runtime")
        ex.input(f"in{k}", ncnn.Mat(np.ascontiguousarray(x)).clone())
    for k, ((name, shape), r) in enumerate(zip(outputs, ref)):
        ret, mat = ex.extract(f"out{k}")
        got = np.array(mat, dtype=np.float32)
        if ret != 0 or got.size != r.size:
            raise NcnnConversionError(f"{source}: ncnn's output {k} ({name!r}) is missing or has "
                                      f"{got.size} values instead of {r.size}; run this part on a PU of "
                                      "another runtime")
        diff = float(np.max(np.abs(got.reshape(r.shape) - r))) if r.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if not diff <= _ATOL + CROSS_RUNTIME_RTOL * scale:
            ops = ", ".join(sorted({n.op_type for n in model.graph.node}))
            raise NcnnConversionError(f"{source}: pnnx's conversion computes another {name!r} than ONNX Runtime "
                                      f"(max difference {diff:.3g}, largest value {scale:.3g}; operators {ops}); "
                                      "run this part on a PU of another runtime")


def convert(model: onnx.ModelProto, source: str = "sub-model") -> Path:
    """Convert ``model`` (static shapes, float32 batch-1 inputs and outputs) to ncnn; the manifest's path.

    Parameters
    ----------
    model : onnx.ModelProto
        A self-contained sub-model (weights as initializers), e.g. a task's or a block's.
    source : str
        What it is, for messages (e.g. ``"task s1.b.t0 (PU b)"``).

    Returns
    -------
    Path
        ``<cache>/<pnnx version>-<sha256>/model.ncnn.json`` (:mod:`ppexec.ncnn_runtime` reads it), made once
        per sub-model and pnnx version.

    Raises
    ------
    NcnnConversionError
        pnnx missing, a tensor ncnn cannot take, a failed conversion (naming the operator where pnnx does),
        or a conversion whose outputs differ from ONNX Runtime's.
    """
    data = model.SerializeToString()
    version = pnnx_version()
    digest = hashlib.sha256(data).hexdigest()
    folder = cache_dir() / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', version)}-{digest}"
    manifest_path = folder / PACK_MANIFEST
    if manifest_path.is_file():
        return manifest_path
    inputs, outputs = _io_specs(model, source)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pnnx-", dir=folder.parent) as tmp:
        work = Path(tmp)
        _run_pnnx(model, inputs, work, source)
        batch = _batch_axes(work, len(inputs))
        _check_outputs(model, work / "m.ncnn.param", work / "m.ncnn.bin", inputs, outputs, batch, source)
        done = work / "out"
        done.mkdir()
        shutil.move(str(work / "m.ncnn.param"), str(done / "model.ncnn.param"))
        shutil.move(str(work / "m.ncnn.bin"), str(done / "model.ncnn.bin"))
        manifest = {"format": MANIFEST_FORMAT, "schema_version": MANIFEST_SCHEMA_VERSION,
                    "param": "model.ncnn.param", "bin": "model.ncnn.bin", "onnx_sha256": digest,
                    "converter": f"pnnx {version}",
                    "inputs": [{"name": n, "blob": f"in{k}", "shape": s, "dtype": "float32",
                                "batch_axis": batch[k]} for k, (n, s) in enumerate(inputs)],
                    "outputs": [{"name": n, "blob": f"out{k}", "shape": s, "dtype": "float32"}
                                for k, (n, s) in enumerate(outputs)]}
        (done / PACK_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        try:
            os.replace(done, folder)  # atomic: a concurrent conversion of the same model wins or loses whole
        except OSError:
            if not manifest_path.is_file():
                raise
    log.debug("%s: converted to ncnn (%s)", source, folder)
    return manifest_path


def pack(manifest_path: Path) -> bytes:
    """The converted model at ``manifest_path`` as one zip (the manifest as :data:`PACK_MANIFEST` and the two
    files it names), as the agent's ``profile`` op takes it (:func:`ppexec.ncnn_runtime.read_pack`)."""
    doc = read_manifest(str(manifest_path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        names = {"param": "model.ncnn.param", "bin": "model.ncnn.bin"}
        for key, name in names.items():
            zf.write(doc[key], name)
        zf.writestr(PACK_MANIFEST, json.dumps({**doc, **names}, sort_keys=True))
    return buf.getvalue()


def compile_plan(plan: ExecutionPlan) -> ExecutionPlan:
    """``plan`` with the model of every task whose PU runs ncnn replaced by its converted model's manifest
    path (:func:`convert`); other tasks untouched. The plan is changed in place and returned.

    Raises
    ------
    NcnnConversionError
        A task pnnx cannot convert (the message names the task, its PU and the operator).
    """
    ncnn_pus = {pu for pu, b in plan.bindings.items() if b.runtime == NCNN_RUNTIME}
    converted: Dict[int, str] = {}
    for tasks in plan.stages:
        for task in tasks:
            if task.pu not in ncnn_pus or not isinstance(task.model, onnx.ModelProto):
                continue
            key = id(task.model)  # replicas share one sub-model
            if key not in converted:
                converted[key] = str(convert(task.model, f"task {task.name} (PU {task.pu}, runtime ncnn)"))
            task.model = converted[key]
    return plan

