#!/usr/bin/python3
"""A pre-norm transformer block written with the operators ONNX added for transformers, at
opset 23: RMSNormalization (23), Attention (23; 3-D inputs, four heads, causal) and Gelu (20),
with MatMul projections and residual Adds. Debian's torch 1.13 exports only up to opset 17, so
the model is built here by hand, and its expected output is the same block computed by torch in
float64 from the same weights: what an exporter's model must reproduce.

Writes tests/golden/torch-opset23/<case>/ in the ONNX backend-test layout (model.onnx,
test_data_set_0/input_0.pb, output_0.pb); tests/engine/microsoft_ops_test.cpp runs it, as does
`deepwire conformance --data tests/golden --suite torch-opset23`.

Usage: /usr/bin/python3 tests/golden/make_opset23_transformer.py
"""
import os
import shutil

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch-opset23")
rng = np.random.default_rng(2323)
torch.set_default_dtype(torch.float64)


def rand(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def block_case(name, batch, seq, dim, heads, ffn, causal, approximate):
    x = rand(batch, seq, dim)
    w = {"s1": (1 + 0.1 * rand(dim)), "s2": (1 + 0.1 * rand(dim)),
         "wq": rand(dim, dim, scale=dim ** -0.5), "wk": rand(dim, dim, scale=dim ** -0.5),
         "wv": rand(dim, dim, scale=dim ** -0.5), "wo": rand(dim, dim, scale=dim ** -0.5),
         "w1": rand(dim, ffn, scale=dim ** -0.5), "w2": rand(ffn, dim, scale=ffn ** -0.5)}
    eps = 1e-5
    nodes = [
        helper.make_node("RMSNormalization", ["x", "s1"], ["n1"], epsilon=eps),
        helper.make_node("MatMul", ["n1", "wq"], ["q"]),
        helper.make_node("MatMul", ["n1", "wk"], ["k"]),
        helper.make_node("MatMul", ["n1", "wv"], ["v"]),
        helper.make_node("Attention", ["q", "k", "v"], ["a"], q_num_heads=heads,
                         kv_num_heads=heads, is_causal=int(causal)),
        helper.make_node("MatMul", ["a", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["h"]),
        helper.make_node("RMSNormalization", ["h", "s2"], ["n2"], epsilon=eps),
        helper.make_node("MatMul", ["n2", "w1"], ["f"]),
        helper.make_node("Gelu", ["f"], ["g"], approximate=approximate),
        helper.make_node("MatMul", ["g", "w2"], ["f2"]),
        helper.make_node("Add", ["h", "f2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10

    # The same block in torch, float64.
    T = {k: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()}
    xt = torch.from_numpy(x.astype(np.float64))

    def rms(t, s):
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * s

    def split(t):  # [B, S, D] -> [B, heads, S, D / heads]
        return t.reshape(batch, seq, heads, dim // heads).transpose(1, 2)

    n1 = rms(xt, T["s1"])
    q, k, v = split(n1 @ T["wq"]), split(n1 @ T["wk"]), split(n1 @ T["wv"])
    scores = q @ k.transpose(-1, -2) / (dim // heads) ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
    h = xt + a @ T["wo"]
    f = rms(h, T["s2"]) @ T["w1"]
    y = h + F.gelu(f, approximate=approximate) @ T["w2"]

    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y.numpy().astype(np.float32), "y").SerializeToString())


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    block_case("transformer_block_causal", 2, 6, 16, 4, 32, True, "none")
    block_case("transformer_block_tanh_gelu", 1, 5, 8, 2, 24, False, "tanh")
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


if __name__ == "__main__":
    main()
