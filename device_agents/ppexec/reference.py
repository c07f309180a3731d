"""Reference results: the unsplit model in one ORT session, and the distance between two sets of outputs."""
from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, List, Mapping, Sequence

import numpy as np

from .plan import PUBinding
from .session import create_session

__all__ = ["reference_outputs", "max_abs_diff", "handed_over_tensors", "with_outputs", "max_scaled_diff",
           "dtype_tolerance", "within_tolerance"]

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
    """
    seen = set(plan.model_outputs)
    names = []
    for tasks in plan.stages:
        for task in tasks:
            for t in task.outputs:
                if t not in seen:
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


def within_tolerance(out: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], names: Sequence[str],
                     atol: float, rtol: float) -> bool:
    """Whether every tensor ``names`` of one frame matches: ``max|out - ref| <= atol_d + rtol_d * max|ref|``
    with ``(atol_d, rtol_d) = dtype_tolerance(ref dtype, atol, rtol)`` (equal shapes and dtypes required;
    NaNs must sit in the same places)."""
    for name in names:
        a, r = np.asarray(out[name]), np.asarray(ref[name])
        if a.shape != r.shape or a.dtype != r.dtype:
            return False
        if r.size == 0:
            continue
        tol_a, tol_r = dtype_tolerance(r.dtype, atol, rtol)
        diff = max_abs_diff([{name: a}], [{name: r}])
        numeric = np.issubdtype(r.dtype, np.number)
        scale = float(np.nanmax(np.abs(r.astype(np.float64)))) if numeric and np.isfinite(diff) else 0.0
        if not np.isfinite(scale):
            scale = 0.0
        if not diff <= tol_a + tol_r * scale:
            return False
    return True
