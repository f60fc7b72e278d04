#!/usr/bin/python3
"""PyTorch side of bench/inference_bench.cpp: rebuilds a sequential ONNX model (the example
MLP/CNN) as torch.nn modules with the ONNX file's weights, checks it against the deepwire output
the C++ bench saved, and prints the samples/s at each batch size as JSON lines.

Run with /usr/bin/python3 (Debian python3-torch). Usage:
  inference_torch.py MODEL.onnx INPUT.npy REFERENCE.npy BATCH [BATCH...]
DW_BENCH_PRECISION=bf16 runs under torch.autocast("cpu", bfloat16), PyTorch's counterpart of
deepwire's precision bf16.
"""
import contextlib
import json
import os
import sys
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class Chain(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Flatten(torch.nn.Module):
    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return torch.flatten(x, self.axis) if self.axis > 0 else x.reshape(1, -1)


def build(model):
    """Maps each node of a single-chain graph to the torch layer that computes it."""
    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    layers = []
    for n in model.graph.node:
        a = attrs(n)
        if n.op_type == "Gemm":
            weight = w[n.input[1]]
            if not a.get("transB", 0):
                weight = weight.t()
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise SystemExit("Gemm with transA/alpha/beta is not part of this bench")
            lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=len(n.input) > 2)
            lin.weight.data = weight.contiguous()
            if len(n.input) > 2:
                lin.bias.data = w[n.input[2]].reshape(-1)
            layers.append(lin)
        elif n.op_type == "Conv":
            weight = w[n.input[1]]
            pads = a.get("pads", [0] * 4)
            if pads[:2] != pads[2:]:
                raise SystemExit("asymmetric Conv padding is not part of this bench")
            conv = torch.nn.Conv2d(weight.shape[1] * a.get("group", 1), weight.shape[0],
                                   tuple(weight.shape[2:]), stride=tuple(a.get("strides", [1, 1])),
                                   padding=tuple(pads[:2]), dilation=tuple(a.get("dilations", [1, 1])),
                                   groups=a.get("group", 1), bias=len(n.input) > 2)
            conv.weight.data = weight
            if len(n.input) > 2:
                conv.bias.data = w[n.input[2]]
            layers.append(conv)
        elif n.op_type == "BatchNormalization":
            bn = torch.nn.BatchNorm2d(w[n.input[1]].numel(), eps=a.get("epsilon", 1e-5))
            bn.weight.data, bn.bias.data = w[n.input[1]], w[n.input[2]]
            bn.running_mean.data, bn.running_var.data = w[n.input[3]], w[n.input[4]]
            layers.append(bn)
        elif n.op_type == "Relu":
            layers.append(torch.nn.ReLU())
        elif n.op_type == "MaxPool":
            pads = a.get("pads", [0] * 4)
            layers.append(torch.nn.MaxPool2d(tuple(a["kernel_shape"]), stride=tuple(a.get("strides", a["kernel_shape"])),
                                             padding=tuple(pads[:2]), ceil_mode=bool(a.get("ceil_mode", 0))))
        elif n.op_type == "Flatten":
            layers.append(Flatten(a.get("axis", 1)))
        else:
            raise SystemExit(f"op {n.op_type} is not part of this bench")
    return Chain(layers).eval()


def main():
    path, input_path, reference_path = sys.argv[1:4]
    batches = [int(b) for b in sys.argv[4:]]
    threads = int(os.environ.get("DW_BENCH_THREADS", "0")) or os.cpu_count() or 1
    bf16 = os.environ.get("DW_BENCH_PRECISION", "fp32") == "bf16"

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    torch.set_num_threads(threads)
    model = onnx.load(path)
    net = build(model)
    x = torch.from_numpy(np.load(input_path))
    ref = np.load(reference_path)
    with torch.inference_mode(), precision():
        got = net(x).float().numpy()
    err = float(np.abs(got - ref).max())
    print(json.dumps({"max_abs_diff_vs_deepwire": err, "threads": torch.get_num_threads()}))
    shape = list(x.shape)
    for batch in batches:
        xb = torch.randn([batch] + shape[1:])
        with torch.inference_mode(), precision():
            for _ in range(3):
                net(xb)
            runs, start = 0, time.perf_counter()
            while True:
                net(xb)
                runs += 1
                elapsed = time.perf_counter() - start
                if elapsed > 1.5 and runs >= 3:
                    break
        print(json.dumps({"batch": batch, "samples_per_s": runs * batch / elapsed}))


if __name__ == "__main__":
    main()
