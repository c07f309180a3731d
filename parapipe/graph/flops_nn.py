"""FLOP formulas of today's sequence and transformer operators, and of ONNX Runtime's contrib ops.

Same conventions as :mod:`parapipe.graph.flops` (a multiply-add is :data:`~parapipe.graph.flops.MAC_FLOPS` = 2
FLOPs, an exp/log/tanh :data:`~parapipe.graph.flops.TRANSCENDENTAL_FLOPS` = 4, a sigmoid 4 + 2): constants are
parapipe conventions, calibrated away per op type by the cost model, so only relative sizes within an op type
matter. Operator semantics: the ONNX operator specification (Attention-23, LSTM/GRU/RNN-22, Einsum-12,
RMSNormalization-23, RotaryEmbedding-23, Swish-24, SwiGLU) and ONNX Runtime's ``docs/ContribOperators.md``
(``com.microsoft`` FusedMatMul, BiasGelu, SkipLayerNormalization, Gelu, FastGelu, QuickGelu, BiasAdd,
FusedConv, MatMulNBits).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import onnx
from onnx import helper

__all__ = ["MAC", "TRANS", "SIGMOID", "SOFTMAX", "LAYER_NORM", "GELU", "attention_flops", "recurrent_flops",
           "einsum_flops", "rms_norm_flops", "rotary_flops", "fused_matmul_flops", "skip_layer_norm_flops",
           "matmul_nbits_flops", "fused_conv_flops", "ONNX_FORMULAS", "MICROSOFT_FORMULAS", "formula"]

MAC = 2.0
TRANS = 4.0
SIGMOID = TRANS + 2.0
#: max, subtract, exp, sum, divide per score (as Softmax in :mod:`parapipe.graph.flops`).
SOFTMAX = 4.0 + TRANS
#: mean, variance (subtract, square-accumulate), normalise, scale and shift per element.
LAYER_NORM = 7.0
GELU = TRANS + 4.0

Shape = Optional[Sequence[int]]


def _numel(shape: Shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _get(shapes: Sequence[Shape], i: int) -> Shape:
    return shapes[i] if len(shapes) > i else None


def attention_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """Attention-23: scores ``Q K^T`` (MACs), scale and mask (1 each per score), softmax, then ``P V`` (MACs).

    Q is ``[B, Hq, Sq, D]`` (or ``[B, Sq, Hq*D]`` with ``q_num_heads``); the key length counts the past keys
    (``present_key`` output, else K plus ``past_key``).
    """
    q, k, v = _get(ins, 0), _get(ins, 1), _get(ins, 2)
    if q is None or k is None or v is None:
        return 0.0
    if len(q) == 4:
        b, hq, sq, d = q
        skv, dv = k[2], v[3]
    else:
        hq = int(_attr(node, "q_num_heads", 1)) or 1
        hkv = int(_attr(node, "kv_num_heads", 1)) or 1
        b, sq, d = q[0], q[1], q[2] // hq
        skv, dv = k[1], v[2] // hkv
    present = _get(outs, 1)
    past = _get(ins, 4)
    if present is not None and len(present) == 4:
        skv = present[2]
    elif past is not None and len(past) == 4:
        skv += past[2]
    scores = b * hq * sq * skv
    masked = _get(ins, 3) is not None or bool(_attr(node, "is_causal", 0))
    return float(MAC * scores * (d + dv) + scores * (SOFTMAX + 1 + (1 if masked else 0)))


_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: Element-wise FLOPs per hidden unit and step besides the matrix products: LSTM 3 sigmoid gates, 2 tanh,
#: c = f*c + i*g (3), h = o*tanh(c) (1); GRU 2 sigmoid gates, 1 tanh, r*(...) (1), h = (1-z)*n + z*h (4);
#: RNN one tanh.
_CELL = {"LSTM": 3 * SIGMOID + 2 * TRANS + 4, "GRU": 2 * SIGMOID + TRANS + 5, "RNN": TRANS}


def recurrent_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """LSTM / GRU / RNN: per step, direction and batch row ``MAC x gates x H x (I + H)`` for the input and
    recurrent products, ``2 x gates x H`` for the biases (when B is given) and the cell's element-wise work."""
    x, w = _get(ins, 0), _get(ins, 1)
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return 0.0
    gates = _GATES[node.op_type]
    dirs, gh, i = w
    h = int(_attr(node, "hidden_size", 0)) or gh // gates
    seq, batch = (x[1], x[0]) if int(_attr(node, "layout", 0)) else (x[0], x[1])
    per_unit = MAC * gates * (i + h) + _CELL[node.op_type]
    if _get(ins, 3) is not None:
        per_unit += 2 * gates
    if node.op_type == "LSTM" and _get(ins, 7) is not None:
        per_unit += MAC * 3  # peepholes
    return float(seq * dirs * batch * h * per_unit)


def einsum_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """Einsum: one multiply per extra operand and one add for every combination of all index values
    (``MAC x prod(all index sizes)`` for two operands); one operand: one add per element when an index is
    summed, else 0 (a transpose or diagonal view)."""
    eq = _attr(node, "equation", b"")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    known = [s for s in ins if s is not None]
    if len(terms) != len(ins) or len(known) != len(ins):
        return 0.0
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, known):
        letters = list(term.replace("...", ""))
        n_ell = len(shape) - len(letters)
        if "..." in term:
            before = term.index("...")
            for j in range(n_ell):
                key = f"...{n_ell - j}"
                sizes[key] = max(sizes.get(key, 1), shape[before + j])
            dims = list(shape[:before]) + list(shape[before + n_ell:])
        else:
            dims = list(shape)
        for letter, dim in zip(letters, dims):
            sizes[letter] = max(sizes.get(letter, 1), dim)
    total = math.prod(sizes.values()) if sizes else 1
    if len(ins) == 1:
        out_letters = set(rhs) if "->" in eq else {c for c in lhs if lhs.count(c) == 1}
        summed = any(c not in out_letters for c in sizes if not c.startswith("..."))
        return float(total) if summed else 0.0
    return float(total * len(ins))


def rms_norm_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """RMSNormalization / SimplifiedLayerNormalization: square-accumulate (2), normalise (1) and scale (1)
    per element."""
    return 4.0 * _numel(_get(outs, 0))


def rotary_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """RotaryEmbedding: ``x * cos + rotate(x) * sin``: 3 FLOPs per rotated element (all of them by default)."""
    return 3.0 * _numel(_get(outs, 0))


def fused_matmul_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """com.microsoft FusedMatMul: MatMul with optional transposes and ``alpha`` (1 per output when != 1)."""
    a, out = _get(ins, 0), _get(outs, 0)
    if a is None or out is None or len(a) < 2:
        return 0.0
    k = a[-2] if int(_attr(node, "transA", 0)) else a[-1]
    alpha = float(_attr(node, "alpha", 1.0))
    return float(MAC * _numel(out) * k + (_numel(out) if alpha != 1.0 else 0))


def skip_layer_norm_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """com.microsoft SkipLayerNormalization: input + skip (+ bias), then a layer normalisation."""
    bias = 1.0 if _get(ins, 4) is not None else 0.0
    per = 1.0 + bias + (LAYER_NORM if node.op_type == "SkipLayerNormalization" else 4.0)
    return per * _numel(_get(outs, 0))


def matmul_nbits_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """com.microsoft MatMulNBits: ``A [..., K] x B [K, N]`` with B block-quantized: MACs plus dequantizing
    B (2 per weight)."""
    out = _get(outs, 0)
    k, n = int(_attr(node, "K", 0)), int(_attr(node, "N", 0))
    if out is None or not k:
        return 0.0
    return float(MAC * _numel(out) * k + 2 * k * n)


def fused_conv_flops(node, ins: Sequence[Shape], outs: Sequence[Shape]) -> float:
    """com.microsoft FusedConv: a Conv (MACs, bias) plus its activation (1 per output element)."""
    w, out = _get(ins, 1), _get(outs, 0)
    if w is None or out is None:
        return 0.0
    return float(MAC * _numel(out) * _numel(w[1:]) + _numel(out) * (2 if _get(ins, 2) is not None else 1))


def _per_output(f: float) -> Callable:
    return lambda node, ins, outs: f * _numel(_get(outs, 0))


#: op type -> formula(node, input shapes, output shapes), for the ONNX domain.
ONNX_FORMULAS: dict[str, Callable] = {
    "Attention": attention_flops, "LSTM": recurrent_flops, "GRU": recurrent_flops, "RNN": recurrent_flops,
    "Einsum": einsum_flops, "RMSNormalization": rms_norm_flops, "RotaryEmbedding": rotary_flops,
    # ONNX Runtime registers SimplifiedLayerNormalization in the ONNX domain.
    "SimplifiedLayerNormalization": rms_norm_flops,
    "Swish": _per_output(SIGMOID + 1), "SwiGLU": _per_output(SIGMOID + 2),
    "CumProd": lambda node, ins, outs: float(_numel(_get(ins, 0))),
    "DeformConv": fused_conv_flops,
}
#: op type -> formula, for ONNX Runtime's ``com.microsoft`` domain.
MICROSOFT_FORMULAS: dict[str, Callable] = {
    "FusedMatMul": fused_matmul_flops, "MatMulNBits": matmul_nbits_flops, "FusedConv": fused_conv_flops,
    "BiasGelu": _per_output(1 + GELU), "Gelu": _per_output(GELU), "FastGelu": _per_output(GELU + 2),
    "QuickGelu": _per_output(SIGMOID + 2), "BiasAdd": _per_output(2.0),
    "SkipLayerNormalization": skip_layer_norm_flops, "SkipSimplifiedLayerNormalization": skip_layer_norm_flops,
}


def formula(node: onnx.NodeProto) -> Optional[Callable]:
    """The formula of ``node`` from the two tables above, or None."""
    if node.domain in ("", "ai.onnx"):
        return ONNX_FORMULAS.get(node.op_type)
    if node.domain == "com.microsoft":
        return MICROSOFT_FORMULAS.get(node.op_type)
    return None
