"""Arithmetic precisions: what a PU's profile asks for, what a runtime adapter reads back, and the output
tolerance a verified run allows for what actually ran.

The convention every runtime adapter (:mod:`.runtimes`, and any adapter module added next to it) follows:

- ``PUBinding.precision`` is the profile's precision (:data:`PRECISIONS`); the adapter sets its runtime to it
  where the runtime has a setting for it (OpenVINO's ``INFERENCE_PRECISION_HINT``, ncnn's fp16/bf16 flags,
  TensorRT's ``trt_fp16_enable``), and otherwise runs the model in its own types;
- ``LoadedModel.describe()["precision"]`` is the precision the runtime WILL compute in, read back from the
  runtime after loading (:func:`normalise_precision` turns a runtime's own spelling into one of
  ``"fp32"``, ``"fp16"``, ``"bf16"``), never the one asked for; ``describe()["precision_read_back"]`` is
  false where the runtime cannot say and the adapter reports what it asked for;
- the verified run (:func:`.bundle_run.run_verified`) compares every tensor with the tolerance of the loosest
  precision among the tasks it depends on (:func:`precision_tolerance`, :func:`loosest`).

``int8`` is a profile precision (a PU whose peak is quoted for int8 arithmetic), not one an adapter reports: a
quantized model carries its own quantize/dequantize operators and the unsplit reference runs them too, so a
float model on such a PU runs (and is checked) as fp32.

Standard library only (Python >= 3.8).
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Tuple

__all__ = ["PRECISIONS", "COMPUTED_PRECISIONS", "PRECISION_RTOL", "normalise_precision", "loosest",
           "precision_tolerance"]

#: Precisions a SoC profile may give a PU (``pus.<name>.precision``).
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
#: Precisions an adapter may report as computed, from the tightest to the loosest (bf16 keeps 8 significand
#: bits, fp16 11, fp32 24: IEEE 754-2008 binary16/binary32 and the bfloat16 format of Intel's BF16 white paper
#: 338302-001US).
COMPUTED_PRECISIONS = ("fp32", "fp16", "bf16")

#: Least relative tolerance (of a tensor's largest magnitude, as :func:`.reference.within_tolerance` applies
#: it) for a tensor that a task computed in that precision, or that depends on one that did. fp32: none beyond
#: the run's own ``rtol``. bf16: the largest error measured on zoo stage sub-models run through OpenVINO 2026.4
#: at bf16 against ONNX Runtime at fp32, every stage at bf16 and fed its own chain's tensors (the worst case of
#: a mixed plan), rounded up: 0.47 for mobilenet_v2 with seeded weights cut into 8 stages (a ReLU6 output,
#: whose largest value is the clip at 6 while the sums before it are larger), 0.02 or less for squeezenet and
#: inception_v1 at 2 to 8 stages; re-measure with ``python benchmarks/precision_tolerance_bench.py --stages 8``.
#: A tolerance this loose still refuses a wrong tensor (a wrong split or binding: differences of the order of
#: the tensor's largest value and above) but not every frame mix-up of a model whose activations hardly depend
#: on its input. fp16: the bf16 figure scaled by the ratio of the formats' unit roundoffs (2**-11 / 2**-8),
#: as no runtime here computes in fp16 (OpenVINO's CPU device turns an f16 hint into bf16 on x86); re-measure on
#: a device that does with the same script's ``--precision fp16``.
PRECISION_RTOL: Dict[str, float] = {"fp32": 0.0, "bf16": 0.5, "fp16": 0.5 / 8}

_SPELLINGS = {"fp32": "fp32", "f32": "fp32", "float32": "fp32", "float": "fp32",
              "fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
              "bf16": "bf16", "bfloat16": "bf16"}


def normalise_precision(value: object) -> Optional[str]:
    """``"fp32"``, ``"fp16"`` or ``"bf16"`` for a runtime's spelling of a precision (``"f32"``,
    ``"<Type: 'bfloat16'>"`` as OpenVINO prints its element types, ``"float16"``, ...); None if it names none of
    them."""
    text = str(value).strip().lower()
    match = re.match(r"^<type:\s*'([a-z0-9_]+)'>$", text)
    if match:
        text = match.group(1)
    return _SPELLINGS.get(text)


def loosest(precisions: Iterable[Optional[str]]) -> str:
    """The loosest of ``precisions`` in :data:`COMPUTED_PRECISIONS` order (``"fp32"`` for none; None entries and
    int8 count as fp32)."""
    rank = {p: i for i, p in enumerate(COMPUTED_PRECISIONS)}
    worst = 0
    for p in precisions:
        worst = max(worst, rank.get(p or "fp32", 0))
    return COMPUTED_PRECISIONS[worst]


def precision_tolerance(precision: Optional[str], atol: float, rtol: float) -> Tuple[float, float]:
    """``(atol, rtol)`` for a tensor computed in ``precision`` (or depending on a task that was): the run's own
    ``atol``/``rtol``, with ``rtol`` raised to at least :data:`PRECISION_RTOL` of that precision.

    Parameters
    ----------
    precision : str or None
        What the runtime reported it computes in (``describe()["precision"]``); None or ``"int8"`` count as
        fp32 (see the module docstring).
    atol, rtol : float
        The run's tolerances (absolute; relative to the tensor's largest magnitude).

    Raises
    ------
    ValueError
        ``precision`` is none of :data:`PRECISIONS`.
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError("unknown precision %r; an adapter reports one of %s"
                         % (precision, ", ".join(COMPUTED_PRECISIONS)))
    return float(atol), max(float(rtol), PRECISION_RTOL.get(precision or "fp32", 0.0))
