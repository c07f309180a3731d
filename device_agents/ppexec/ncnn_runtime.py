"""Runtime ``"ncnn"``: Tencent's ncnn (``pip install ncnn``) runs stage sub-models converted on the host by pnnx.

ncnn cannot read ONNX: parapipe converts each sub-model on the host (``parapipe.execution.ncnn_convert``) into
an ncnn model, ``<stem>.ncnn.param`` (the graph) and ``<stem>.ncnn.bin`` (the weights), described by a
manifest ``<stem>.ncnn.json`` (:data:`MANIFEST_FORMAT`, schema :data:`MANIFEST_SCHEMA_VERSION`)::

    {"format": "parapipe-ncnn", "schema_version": 1, "param": "<stem>.ncnn.param", "bin": "<stem>.ncnn.bin",
     "onnx_sha256": "...", "converter": "pnnx 20261020",
     "inputs":  [{"name": <ONNX name>, "blob": "in0",  "shape": [1, C, H, W], "dtype": "float32",
                  "batch_axis": true}, ...],
     "outputs": [{"name": <ONNX name>, "blob": "out0", "shape": [1, N],       "dtype": "float32"}, ...]}

pnnx renames the graph's inputs and outputs ``in0, in1, ...`` / ``out0, out1, ...`` in the ONNX graph's order;
the manifest keeps the ONNX names, so the executor feeds and fetches by ONNX name as with every other runtime.
:meth:`NcnnAdapter.load` takes the manifest's path (a bundle's ``models/<task>.ncnn.json``) or the bytes of a zip
holding the three files (what the agent's ``profile`` op receives; :func:`read_pack`).

ncnn's Mats are CHW without a batch axis (``ncnn.Mat(ndarray)`` reads a 3-D array as C, H, W; a 4-D NCHW array
runs and gives a wrong result): a feed of batch 1 is passed as ``x[0]``, and each output is reshaped back to
its ONNX shape. Batches other than 1 are refused. Where pnnx found no batch axis (an input that only feeds
shape-agnostic operators such as Concat or Add), the manifest says ``"batch_axis": false`` and the whole
tensor is the Mat.

``runtime_options`` (:data:`NCNN_OPTIONS`): ``device`` ``cpu`` (default) or ``vulkan`` (``net.opt.
use_vulkan_compute``; without a Vulkan device ncnn silently computes on the CPU, so :meth:`NcnnAdapter.check`
refuses ``vulkan`` where ``ncnn.get_gpu_count()`` is 0), ``precision`` ``fp32`` (default: fp16 storage, packing
and arithmetic off, bf16 storage off; ncnn's own defaults turn fp16 on) or ``fp16`` (fp16 storage, packing and
arithmetic on), and ``gpu_index`` (the Vulkan device, default ncnn's default device). ``num_threads`` is the
binding's ``threads``. The worker thread is pinned before :meth:`NcnnAdapter.load`, and ncnn's OpenMP threads
start from the thread that first runs the model, so they inherit its CPU mask.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import plan_error
from .plan import PUBinding

__all__ = ["MANIFEST_FORMAT", "MANIFEST_SCHEMA_VERSION", "PACK_MANIFEST", "NCNN_OPTIONS", "NcnnModel",
           "NcnnAdapter", "read_manifest", "read_pack"]

logger = logging.getLogger(__name__)

#: ``format`` field of a converted model's manifest.
MANIFEST_FORMAT = "parapipe-ncnn"
#: Version of the manifest's fields.
MANIFEST_SCHEMA_VERSION = 1
#: Name of the manifest inside a pack (the zip the agent's ``profile`` op receives).
PACK_MANIFEST = "model.ncnn.json"
#: ``runtime_options`` keys of the ``ncnn`` runtime.
NCNN_OPTIONS = {
    "device": "'cpu' (default) or 'vulkan' (a Vulkan GPU; refused where ncnn finds none)",
    "precision": "'fp32' (default: fp16/bf16 storage and arithmetic off) or 'fp16' (fp16 storage, packing "
                 "and arithmetic on)",
    "gpu_index": "Vulkan device index (default: ncnn's default device); device 'vulkan' only",
}
_DEVICES = ("cpu", "vulkan")
_PRECISIONS = ("fp32", "fp16")


def read_manifest(path: str) -> Dict[str, Any]:
    """The manifest at ``path`` with ``param`` and ``bin`` made absolute paths.

    Raises
    ------
    PlanError
        Not a parapipe ncnn manifest, another schema version, or its files missing.
    """
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise plan_error(path, None, "not a readable ncnn model manifest (%s)" % exc,
                         "convert the sub-model with parapipe (runtime ncnn)")
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise plan_error(path, "format", "not a parapipe ncnn manifest (runtime ncnn runs models converted by "
                         "parapipe, not ONNX files)", "let parapipe run, profile or deploy the PU")
    if doc.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise plan_error(path, "schema_version", "expected %d, got %r" % (MANIFEST_SCHEMA_VERSION,
                                                                        doc.get("schema_version")),
                         "convert the sub-model again with this parapipe")
    base = os.path.dirname(os.path.abspath(path))
    for key in ("param", "bin"):
        full = os.path.join(base, str(doc.get(key)))
        if not os.path.isfile(full):
            raise plan_error(path, key, "file %r is missing" % doc.get(key), "convert the sub-model again")
        doc[key] = full
    return doc


def read_pack(data: bytes, folder: str) -> Dict[str, Any]:
    """Unpack a pack (zip bytes holding :data:`PACK_MANIFEST` and the files it names) into ``folder``; its
    manifest (:func:`read_manifest`)."""
    import io
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for name in zf.namelist():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise plan_error("ncnn pack", name, "member outside the pack's folder", "convert again")
        zf.extractall(folder)
    return read_manifest(os.path.join(folder, PACK_MANIFEST))


def _import_ncnn() -> Any:
    import ncnn  # lazy: an optional dependency of the board
    return ncnn


def _quiet_gpu_count(ncnn: Any) -> int:
    """``ncnn.get_gpu_count()`` with the process's stderr (fd 2) silenced: without a Vulkan loader, ncnn's first
    GPU query prints a ``dlopen failed libvulkan.so.1`` line per attempt there (measured, ncnn 1.0.20261020),
    which would break the one-line errors of the commands that probe the runtimes."""
    try:
        saved = os.dup(2)
    except OSError:
        return int(ncnn.get_gpu_count())
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                return int(ncnn.get_gpu_count())
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _options(binding: PUBinding) -> Dict[str, Any]:
    opts = dict(binding.runtime_options)
    return {"device": str(opts.get("device", "cpu")).lower(), "precision": str(opts.get("precision", "fp32")),
            "gpu_index": opts.get("gpu_index")}


class NcnnModel:
    """An ``ncnn.Net`` behind the :class:`.runtimes.LoadedModel` protocol (``.net`` is public)."""

    def __init__(self, ncnn: Any, net: Any, manifest: Dict[str, Any], device: str, precision: str):
        self._ncnn, self.net, self.device, self.precision = ncnn, net, device, precision
        self._inputs = list(manifest["inputs"])
        self._outputs = {o["name"]: o for o in manifest["outputs"]}
        self.input_names = [i["name"] for i in self._inputs]
        self.output_names = [o["name"] for o in manifest["outputs"]]
        self.input_specs: List[Tuple[str, List[Optional[int]], Optional[str]]] = [
            (i["name"], [int(d) for d in i["shape"]], str(i.get("dtype") or "float32")) for i in self._inputs]
        self.converter = manifest.get("converter")

    def run(self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        ncnn = self._ncnn
        ex = self.net.create_extractor()
        for spec in self._inputs:
            x = np.asarray(feeds[spec["name"]])
            if x.ndim == 0 or x.shape[0] != 1:
                raise ValueError("ncnn runs batch 1 only: input %r has shape %s; run the model at batch 1"
                                 % (spec["name"], list(x.shape)))
            x = x[0] if spec.get("batch_axis", True) else x  # pnnx dropped the batch axis, or found none
            ex.input(spec["blob"], ncnn.Mat(np.ascontiguousarray(x, dtype=np.float32)).clone())
        results = []
        for name in output_names:
            spec = self._outputs.get(name)
            if spec is None:
                raise KeyError("the ncnn model has no output %r (outputs %s)" % (name, self.output_names))
            ret, mat = ex.extract(spec["blob"])
            if ret != 0:
                raise RuntimeError("ncnn could not compute output %r (blob %s): error %d"
                                   % (name, spec["blob"], ret))
            results.append(np.array(mat, dtype=np.float32).reshape([int(d) for d in spec["shape"]])
                           .astype(spec.get("dtype") or "float32", copy=False))
        return results

    def describe(self) -> Dict[str, Any]:
        opt = self.net.opt
        fp16 = bool(opt.use_fp16_storage) or bool(opt.use_fp16_arithmetic)
        # what ncnn will compute in, read back from the net's options (ppexec.precision's convention): the
        # run checks this PU's tensors at that precision's tolerance
        ran = "fp16" if fp16 else "bf16" if bool(opt.use_bf16_storage) else "fp32"
        return {"runtime": "ncnn", "version": getattr(self._ncnn, "__version__", None),
                "device": "vulkan" if opt.use_vulkan_compute else "cpu", "threads": int(opt.num_threads),
                "fp16_storage": bool(opt.use_fp16_storage), "fp16_arithmetic": bool(opt.use_fp16_arithmetic),
                "bf16_storage": bool(opt.use_bf16_storage), "precision": ran, "precision_read_back": True,
                "requested_precision": self.precision, "converter": self.converter}

    def close(self) -> None:
        if self.net is not None:
            self.net.clear()
        self.net = None


class NcnnAdapter:
    """Runtime ``"ncnn"`` (see the module docstring); ``provider`` / ``provider_options`` do not apply."""

    name = "ncnn"
    options = NCNN_OPTIONS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probe: Optional[Dict[str, Any]] = None

    def probe(self) -> Dict[str, Any]:
        with self._lock:
            if self._probe is None:
                try:
                    ncnn = _import_ncnn()
                    gpus = _quiet_gpu_count(ncnn)
                    names = [str(ncnn.get_gpu_info(i).device_name()) for i in range(gpus)]
                    self._probe = {"available": True, "version": getattr(ncnn, "__version__", None),
                                   "reason": None, "vulkan_devices": names}
                except Exception as exc:  # ImportError, a broken install
                    reason = "ncnn is not usable: %s; pip install ncnn" % " ".join(
                        ("%s: %s" % (type(exc).__name__, exc)).split())
                    self._probe = {"available": False, "version": None, "reason": reason, "vulkan_devices": []}
            return dict(self._probe)

    def check(self, pu: str, binding: PUBinding) -> Optional[str]:
        probe = self.probe()
        if not probe["available"]:
            return "PU %r: runtime ncnn: %s, or bind the PU to runtime onnxruntime" % (pu, probe["reason"])
        if binding.provider != "CPUExecutionProvider" or binding.provider_options:
            return ("PU %r: provider %s applies to runtime onnxruntime only; give ncnn's device as "
                    "runtime_options.device (cpu or vulkan) instead" % (pu, binding.provider))
        unknown = sorted(str(k) for k in binding.runtime_options if k not in NCNN_OPTIONS)
        if unknown:
            return ("PU %r: runtime_options %s are not options of runtime ncnn (known: %s); remove them"
                    % (pu, unknown, ", ".join(sorted(NCNN_OPTIONS))))
        opts = _options(binding)
        if opts["device"] not in _DEVICES:
            return "PU %r: runtime_options.device is %r; use 'cpu' or 'vulkan'" % (pu, opts["device"])
        if opts["precision"] not in _PRECISIONS:
            return "PU %r: runtime_options.precision is %r; use 'fp32' or 'fp16'" % (pu, opts["precision"])
        if opts["device"] == "vulkan":
            gpus = len(probe["vulkan_devices"])
            if gpus == 0:
                return ("PU %r: runtime ncnn: device vulkan asked, but ncnn finds no Vulkan device on this host "
                        "(ncnn.get_gpu_count() is 0: no Vulkan driver); install the GPU's Vulkan driver, or "
                        "run the PU on ncnn's CPU device (--bind %s=ncnn:cpu)" % (pu, pu))
            index = opts["gpu_index"]
            if index is not None and not (str(index).isdigit() and int(index) < gpus):
                return "PU %r: runtime_options.gpu_index %r: this host has Vulkan devices 0..%d" % (
                    pu, index, gpus - 1)
        return None

    def load(self, model: Any, binding: PUBinding, pu: str) -> NcnnModel:
        ncnn = _import_ncnn()
        opts = _options(binding)
        folder = None
        try:
            if isinstance(model, (bytes, bytearray)):
                if not bytes(model[:2]) == b"PK":
                    raise plan_error("PU %s" % pu, "model", "runtime ncnn got ONNX bytes, not a converted "
                                     "ncnn model", "let parapipe convert the sub-model (runtime ncnn)")
                folder = tempfile.mkdtemp(prefix="ppexec-ncnn-")
                manifest = read_pack(bytes(model), folder)
            elif isinstance(model, str) and model.endswith(".json"):
                manifest = read_manifest(model)
            else:
                raise plan_error("PU %s" % pu, "model", "runtime ncnn runs models converted by parapipe "
                                 "(an .ncnn.json manifest), got %s" % type(model).__name__,
                                 "let parapipe convert the sub-model (runtime ncnn)")
            net = ncnn.Net()
            vulkan = opts["device"] == "vulkan"
            fp16 = opts["precision"] == "fp16"
            net.opt.use_vulkan_compute = vulkan
            if vulkan and opts["gpu_index"] is not None:
                net.set_vulkan_device(int(opts["gpu_index"]))
            net.opt.num_threads = int(binding.threads)
            net.opt.use_fp16_storage = fp16
            net.opt.use_fp16_packed = fp16
            net.opt.use_fp16_arithmetic = fp16
            net.opt.use_bf16_storage = False
            if hasattr(net.opt, "use_bf16_packed"):
                net.opt.use_bf16_packed = False
            if net.load_param(manifest["param"]) != 0 or net.load_model(manifest["bin"]) != 0:
                raise plan_error("PU %s" % pu, "model", "ncnn could not load %s" % manifest["param"],
                                 "convert the sub-model again")
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        logger.debug("PU %s: ncnn loaded %s on %s (%s, %d threads)", pu, manifest["param"], opts["device"],
                     opts["precision"], binding.threads)
        return NcnnModel(ncnn, net, manifest, opts["device"], opts["precision"])
