"""Reference results: the unsplit model in one ORT session, and the distance between two sets of outputs."""
from __future__ import annotations

import logging
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .plan import PUBinding
from .precision import loosest
from .session import create_session

__all__ = ["reference_outputs", "max_abs_diff", "handed_over_tensors", "with_outputs", "max_scaled_diff",
           "dtype_tolerance", "within_tolerance", "softmax_bound", "tensor_precisions", "SOFTMAX_OPS"]

#: ONNX operators whose output's error :func:`softmax_bound` bounds through their input.
SOFTMAX_OPS = ("Softmax", "LogSoftmax")

logger = logging.getLogger(__name__)


def reference_outputs(model: Any, frames: Iterable[Mapping[str, np.ndarray]],
                      threads: int = 1) -> List[Dict[str, np.ndarray]]:
    """Run the unsplit ``model`` once per frame in one CPU session (``threads`` intra-op threads).

    The session uses the executor's options (full graph optimisation, no spinning), without pinning.

    Parameters
    ----------
    model : onnx.ModelProto, bytes or str
        A model ONNX Runtime can load as is (e.g. ``OpGraph.model``), its bytes or its file path.
    frames : iterable of dict of str to numpy.ndarray
        Tensors by name; only the names the model takes as inputs are fed (extra keys are ignored).
    threads : int
        ``intra_op_num_threads`` (default 1).

    Returns
    -------
    list of dict of str to numpy.ndarray
        Every graph output of ``model`` per frame, in frame order.
    """
    sess = create_session(model, PUBinding(cpus=None, threads=threads), "CPUExecutionProvider")
    names = [i.name for i in sess.get_inputs()]
    outputs = [o.name for o in sess.get_outputs()]
    results = []
    for frame in frames:
        results.append(dict(zip(outputs, sess.run(outputs, {n: frame[n] for n in names if n in frame}))))
    return results


def max_abs_diff(outs_a: Sequence[Mapping[str, np.ndarray]],
                 outs_b: Sequence[Mapping[str, np.ndarray]]) -> float:
    """Largest absolute element difference between two runs' outputs (same frames, same tensor names).

    NaNs in the same place on both sides count as equal; a NaN on one side only gives ``inf``.

    Parameters
    ----------
    outs_a, outs_b : sequence of dict of str to numpy.ndarray
        Per-frame outputs, e.g. from :func:`reference_outputs` and the pipelined executor.

    Returns
    -------
    float
        ``0.0`` for identical outputs (and for two empty sequences).

    Raises
    ------
    ValueError
        Different numbers of frames, different tensor names in a frame, or different shapes.
    """
    if len(outs_a) != len(outs_b):
        raise ValueError(f"max_abs_diff: {len(outs_a)} frames vs {len(outs_b)}; "
                         "compare runs over the same frames")
    worst = 0.0
    for i, (a, b) in enumerate(zip(outs_a, outs_b)):
        if set(a) != set(b):
            raise ValueError(f"max_abs_diff: frame {i} has outputs {sorted(a)} vs {sorted(b)}")
        for name in a:
            x, y = np.asarray(a[name]), np.asarray(b[name])
            if x.shape != y.shape:
                raise ValueError(f"max_abs_diff: frame {i} output {name!r} has shape {x.shape} vs {y.shape}")
            if x.size == 0:
                continue
            if not (np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number)):
                worst = max(worst, 0.0 if np.array_equal(x, y) else float("inf"))
                continue
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            nan_x, nan_y = np.isnan(xf), np.isnan(yf)
            if np.any(nan_x != nan_y):
                return float("inf")
            same = (xf == yf) | nan_x  # equal values (infinities included) and NaN pairs count as 0
            with np.errstate(invalid="ignore"):  # inf - inf where both are inf: masked by `same`
                diff = np.where(same, 0.0, np.abs(xf - yf))
            worst = max(worst, float(diff.max()))
    return worst


def handed_over_tensors(plan) -> List[str]:
    """Every tensor a task of ``plan`` hands on (task outputs that are not model outputs), in plan order.

    These are the tensors a split can get wrong: comparing them checks every task, even when the model's own
    outputs hardly depend on the input (the onnx wheel's light zoo models have constant weights, so their
    softmax outputs are the same for every input).

    Of a replicated stage, only the tensors every replica makes: a replica that is a PU group hands tensors
    between its own PUs that a single-PU replica never makes (its frames then check the stage's outputs only).
    """
    seen = set(plan.model_outputs)
    names = []
    for s, tasks in enumerate(plan.stages):
        common = None
        if plan.replica_count(s) > 1:
            for replica in plan.replicas(s):
                made = {t for task in replica for t in task.outputs}
                common = made if common is None else common & made
        for task in tasks:
            for t in task.outputs:
                if t not in seen and (common is None or t in common):
                    seen.add(t)
                    names.append(t)
    return names


def with_outputs(plan, names: Sequence[str]):
    """A copy of ``plan`` that also returns ``names`` (tensors it produces) with every frame."""
    import dataclasses
    extra = [n for n in names if n not in plan.model_outputs]
    return dataclasses.replace(plan, model_outputs=list(plan.model_outputs) + extra)


def max_scaled_diff(out: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                    names: Sequence[str]) -> float:
    """Largest ``max|out - ref| / max|ref|`` over the tensors ``names`` of one frame (0 for equal tensors).

    A tensor whose reference is all zeros counts its absolute difference.
    """
    worst = 0.0
    for name in names:
        diff = max_abs_diff([{name: out[name]}], [{name: ref[name]}])
        values = np.asarray(ref[name])
        numeric = values.size and np.issubdtype(values.dtype, np.number)
        scale = float(np.max(np.abs(values))) if numeric else 0.0
        worst = max(worst, diff / scale if scale > 0 and np.isfinite(scale) else diff)
    return worst


def dtype_tolerance(dtype, atol: float, rtol: float):
    """``(atol, rtol)`` for comparing tensors of ``dtype``: exact for integers and booleans; for floats at least
    two units of the dtype's resolution (``2 * finfo(dtype).eps`` relative, ``finfo(dtype).tiny`` absolute), so
    an fp16 output one ulp off still matches while fp32 keeps the requested ``atol``/``rtol``."""
    dt = np.dtype(dtype)
    if dt.kind not in "fc":
        return 0.0, 0.0
    info = np.finfo(dt)
    return max(float(atol), float(info.tiny)), max(float(rtol), 2.0 * float(info.eps))


def _largest(values: np.ndarray) -> float:
    """max |values| as a float (0 for an empty, non-numeric or non-finite maximum)."""
    if not values.size or not np.issubdtype(values.dtype, np.number):
        return 0.0
    scale = float(np.nanmax(np.abs(values.astype(np.float64))))
    return scale if np.isfinite(scale) else 0.0


def softmax_bound(op: str, input_error: float, largest_output: float) -> float:
    """Largest absolute error of a Softmax or LogSoftmax output whose input is off by at most ``input_error``
    per element (and exact otherwise).

    With ``z'`` = ``z + d``, ``|d| <= e``: ``softmax(z')_i = softmax(z)_i * exp(d_i) / sum_j softmax(z)_j
    exp(d_j)`` lies within a factor ``exp(+-2e)`` of ``softmax(z)_i``, so ``|softmax(z')_i - softmax(z)_i| <=
    max softmax(z) * (exp(2e) - 1)``, and never more than 1 (both are probabilities); ``log_softmax(z')_i -
    log_softmax(z)_i = d_i - log(sum_j softmax(z)_j exp(d_j))`` is within ``2e``. A softmax of logits that are
    equal up to rounding at a large magnitude (the light zoo models of the onnx wheel: constant weights, logits
    ~7e9, where one float32 ulp is 512) may then be anything: only its input can be checked.

    Parameters
    ----------
    op : {"Softmax", "LogSoftmax"}
    input_error : float
        The input's tolerance, ``atol + rtol * max|z|`` (:func:`within_tolerance`).
    largest_output : float
        ``max softmax(z)`` of the reference (ignored for LogSoftmax).

    Raises
    ------
    ValueError
        ``op`` is not one of :data:`SOFTMAX_OPS`.
    """
    if op == "LogSoftmax":
        return 2.0 * float(input_error)
    if op != "Softmax":
        raise ValueError("softmax_bound: %r is not one of %s" % (op, ", ".join(SOFTMAX_OPS)))
    return min(1.0, float(largest_output) * math.expm1(min(2.0 * float(input_error), 700.0)))


def within_tolerance(out: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], names: Sequence[str],
                     atol: float, rtol: float, tolerances: Optional[Mapping[str, Tuple[float, float]]] = None,
                     softmax_inputs: Optional[Mapping[str, Tuple[str, str]]] = None) -> bool:
    """Whether every tensor ``names`` of one frame matches: ``max|out - ref| <= atol_d + rtol_d * max|ref|``
    with ``(atol_d, rtol_d) = dtype_tolerance(ref dtype, atol, rtol)`` (equal shapes and dtypes required;
    NaNs must sit in the same places).

    Parameters
    ----------
    out, ref : dict of str to numpy.ndarray
        One frame's tensors; ``ref`` also holds the inputs named by ``softmax_inputs``.
    names : sequence of str
    atol, rtol : float
        Absolute tolerance; relative tolerance, of the tensor's largest magnitude.
    tolerances : dict of str to (float, float), optional
        ``(atol, rtol)`` of a tensor instead of ``atol``, ``rtol`` (the precision it was computed in:
        :func:`.precision.precision_tolerance`).
    softmax_inputs : dict of str to (str, str), optional
        Output name -> (its input's name in ``ref``, ``"Softmax"`` or ``"LogSoftmax"``): such an output also
        matches within :func:`softmax_bound` of its input's tolerance (the input tensor itself is not
        compared: the pipeline need not produce it).
    """
    for name in names:
        a, r = np.asarray(out[name]), np.asarray(ref[name])
        if a.shape != r.shape or a.dtype != r.dtype:
            return False
        if r.size == 0:
            continue
        want_a, want_r = (tolerances or {}).get(name, (atol, rtol))
        tol_a, tol_r = dtype_tolerance(r.dtype, want_a, want_r)
        diff = max_abs_diff([{name: a}], [{name: r}])
        scale = _largest(r) if np.isfinite(diff) else 0.0
        limit = tol_a + tol_r * scale
        source = (softmax_inputs or {}).get(name)
        if source is not None and source[0] in ref and np.isfinite(diff):
            z = np.asarray(ref[source[0]])
            z_a, z_r = dtype_tolerance(z.dtype, want_a, want_r)
            limit = max(limit, softmax_bound(source[1], z_a + z_r * _largest(z), scale))
        if not diff <= limit:
            return False
    return True


def tensor_precisions(plan, task_precision: Mapping[str, Optional[str]]) -> Dict[str, str]:
    """For every tensor a task of ``plan`` produces, the loosest precision among the task that produces it
    and every task upstream of it (:func:`.precision.loosest`): an fp32 stage fed a bf16 stage's tensors
    carries bf16 errors.

    Parameters
    ----------
    plan : ExecutionPlan
    task_precision : dict of str to str
        Task name -> the precision its runtime reported (``describe()["precision"]``); a task not listed
        counts as fp32.
    """
    tasks = [task for stage in plan.stages for task in stage]
    found: Dict[str, str] = {}
    for _ in range(len(tasks) + 1):  # stage order, then deps inside a stage: settles in a few passes
        before = dict(found)
        for task in tasks:
            here = loosest([found.get(name) for name in task.inputs] + [task_precision.get(task.name)])
            for name in task.outputs:  # replicas produce the same tensors: the loosest of them
                found[name] = loosest([found.get(name), here])
        if found == before:
            break
    return found
