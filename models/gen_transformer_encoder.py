"""A small Transformer encoder as ONNX, with every attention head an explicit parallel branch.

The encoder of Vaswani et al. (NeurIPS 2017, "Attention is all you need") in BERT's post-layer-norm form with
GELU (Devlin et al., NAACL 2019), at the "BERT-mini" size of Turc et al. (arXiv:1908.08962, 2019): 4 layers,
hidden size 256, 4 heads of 64, feed-forward size 1024; sequence length 128. The input is the token embedding
sum (word + position + segment, computed outside the model, so the graph has one float input); an embedding
layer norm follows, as in BERT.

Each head is its own branch: per-head Q/K/V projections (MatMul + Add), ``Q K^T`` (Transpose + MatMul), the
1/sqrt(64) scale, Softmax, the product with V; the heads' outputs are concatenated before the output
projection. Exporters usually fuse the heads into one batched MatMul; splitting them exposes the parallelism
that intra-stage mapping can use (the FLOPs are the same). GELU is written with Erf, as ``torch.onnx`` exports
it at opset 17. About 3.2 M parameters and 0.9 GFLOPs. Weights: seeded He-normal, not trained values.
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from . import _onnx_builder


SEQ_LEN = 128
D_MODEL = 256  # Turc et al. 2019, BERT-mini
N_HEADS = 4
N_LAYERS = 4
D_FF = 1024  # 4 x D_MODEL (Devlin et al. 2019)
LAYER_NORM_EPS = 1e-12  # BERT's value
SEED = 2017


class _Encoder:
    def __init__(self, seed: int) -> None:
        self.b = _onnx_builder.GraphBuilder("transformer_encoder", seed)
        self.d_head = D_MODEL // N_HEADS

    def layer_norm(self, name: str, x: str, output=None) -> str:
        gamma = self.b.const(f"{name}.weight", np.ones(D_MODEL, dtype=np.float32))
        beta = self.b.const(f"{name}.bias", np.zeros(D_MODEL, dtype=np.float32))
        return self.b.op("LayerNormalization", name, [x, gamma, beta], output=output, axis=-1,
                         epsilon=LAYER_NORM_EPS)

    def gelu(self, name: str, x: str) -> str:
        b = self.b
        y = b.op("Div", f"{name}.div", [x, b.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))])
        y = b.op("Erf", f"{name}.erf", [y])
        y = b.op("Add", f"{name}.add", [y, b.const("one", np.array(1.0, dtype=np.float32))])
        y = b.op("Mul", f"{name}.mul", [x, y])
        return b.op("Mul", f"{name}.half", [y, b.const("half", np.array(0.5, dtype=np.float32))])

    def head(self, name: str, x: str) -> str:
        b, d = self.b, self.d_head
        q = b.linear(f"{name}.query", x, D_MODEL, d)
        k = b.linear(f"{name}.key", x, D_MODEL, d)
        v = b.linear(f"{name}.value", x, D_MODEL, d)
        kt = b.op("Transpose", f"{name}.key_t", [k], perm=[0, 2, 1])
        scores = b.op("MatMul", f"{name}.scores", [q, kt])
        scale = b.const("attn_scale", np.array(1.0 / math.sqrt(d), dtype=np.float32))
        scores = b.op("Mul", f"{name}.scale", [scores, scale])
        probs = b.op("Softmax", f"{name}.softmax", [scores], axis=-1)
        return b.op("MatMul", f"{name}.context", [probs, v])

    def layer(self, name: str, x: str, output=None) -> str:
        b = self.b
        heads = [self.head(f"{name}.attention.head{h}", x) for h in range(N_HEADS)]
        ctx = b.op("Concat", f"{name}.attention.concat", heads, axis=-1)
        y = b.linear(f"{name}.attention.output", ctx, D_MODEL, D_MODEL)
        x = self.layer_norm(f"{name}.attention.norm", b.op("Add", f"{name}.attention.residual", [x, y]))
        h = self.gelu(f"{name}.ffn.gelu", b.linear(f"{name}.ffn.intermediate", x, D_MODEL, D_FF))
        y = b.linear(f"{name}.ffn.output", h, D_FF, D_MODEL)
        return self.layer_norm(f"{name}.ffn.norm", b.op("Add", f"{name}.ffn.residual", [x, y]), output)


def transformer_encoder(seed: int = SEED) -> onnx.ModelProto:
    """Build the encoder (input ``embeddings`` float32[1, 128, 256], output ``hidden_states`` float32[1, 128,
    256]).

    Parameters
    ----------
    seed : int
        Seed of the weights (the registry uses the default, so the model and its sha256 are fixed).

    Returns
    -------
    onnx.ModelProto
        Opset 17, IR 8, checked by ``onnx.checker.check_model(full_check=True)``.
    """
    enc = _Encoder(seed)
    x = enc.layer_norm("embeddings.norm", "embeddings")
    for i in range(N_LAYERS):
        x = enc.layer(f"layer{i}", x, output="hidden_states" if i == N_LAYERS - 1 else None)
    return enc.b.model([("embeddings", (1, SEQ_LEN, D_MODEL))], [("hidden_states", (1, SEQ_LEN, D_MODEL))],
                       doc="Transformer encoder (BERT-mini size: 4 layers, 256 hidden, 4 heads as parallel "
                           "branches, seq 128); seeded He-normal weights")
