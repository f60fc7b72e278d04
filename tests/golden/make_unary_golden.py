#!/usr/bin/python3
"""Reference values for every elementwise op of one input (ops/unary_table.cpp).

Run with /usr/bin/python3 (torch); writes tests/golden/unary_golden.json, which
tests/engine/unary_table_test.cpp reads. Each case names an ONNX op, its attributes (none: the
schema's defaults, which the test requires for every op), the points x, and float64 references
for y = f(x) and, where the op has a gradient, dy/dx. The references come from torch's own
functions and its autograd, written here from the ONNX definitions, not from deepwire's code.
Attributes are float32 in ONNX, so the references use each constant rounded to float32 (f32), the
schema defaults included. The points keep clear of kinks and of the edges of each function's domain, so that the finite
differences the test also takes are meaningful.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unary_golden.json")
torch.set_default_dtype(torch.float64)

WIDE = [-3.3, -2.1, -1.4, -0.7, -0.3, 0.25, 0.6, 1.1, 1.7, 2.4, 3.2]
UNIT = [-0.85, -0.6, -0.35, -0.1, 0.15, 0.4, 0.7, 0.9]
POS = [0.15, 0.4, 0.9, 1.3, 2.2, 3.7, 8.5]
cases = []


def f32(v):
    return float(np.float32(v))


def add(op, fn, xs=WIDE, attrs=None, gradient=True, name=None):
    x = torch.tensor(xs, requires_grad=True)
    y = fn(x)
    case = {"name": name or op, "op": op, "attrs": attrs or {}, "x": xs,
            "y": [float(f"{v:.15g}") for v in y.detach().tolist()]}
    if gradient:
        (g,) = torch.autograd.grad(y.sum(), x)
        case["dydx"] = [float(f"{v:.15g}") for v in g.tolist()]
    cases.append(case)


def hard_sigmoid(a, b):
    return lambda x: torch.clamp(a * x + b, 0.0, 1.0)


def shrink(lambd, bias):
    return lambda x: torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, 0.0 * x))


add("Abs", torch.abs)
add("Neg", torch.neg, gradient=False)  # differentiated by its own builder (a Neg)
add("Sign", torch.sign, gradient=False)
add("Relu", torch.relu)
add("Floor", torch.floor, gradient=False)
add("Ceil", torch.ceil, gradient=False)
add("Round", torch.round, xs=[-2.5, -1.5, -0.6, -0.5, 0.4, 0.5, 1.5, 2.5, 3.7], gradient=False)
add("Reciprocal", torch.reciprocal, xs=[-3.1, -0.7, 0.4, 1.3, 5.0])
add("Sqrt", torch.sqrt, xs=POS)
add("Exp", torch.exp)
add("Log", torch.log, xs=POS)
add("Sin", torch.sin)
add("Cos", torch.cos)
add("Tan", torch.tan, xs=[-1.2, -0.8, -0.3, 0.2, 0.7, 1.3])
add("Asin", torch.asin, xs=UNIT)
add("Acos", torch.acos, xs=UNIT)
add("Atan", torch.atan)
add("Sinh", torch.sinh)
add("Cosh", torch.cosh)
add("Asinh", torch.asinh)
add("Acosh", torch.acosh, xs=[1.1, 1.5, 2.3, 4.0, 9.5])
add("Atanh", torch.atanh, xs=UNIT)
add("Sigmoid", torch.sigmoid, xs=WIDE + [-30.0, 30.0])
add("Tanh", torch.tanh)
add("Erf", torch.erf)
add("Softplus", lambda x: torch.log1p(torch.exp(x)), xs=WIDE + [-25.0, 25.0])
add("Softsign", F.softsign)
add("LeakyRelu", lambda x: F.leaky_relu(x, f32(0.01)))
add("LeakyRelu", lambda x: F.leaky_relu(x, f32(0.3)), attrs={"alpha": 0.3}, name="LeakyRelu_alpha")
add("Elu", lambda x: F.elu(x, 1.0))
add("Elu", lambda x: F.elu(x, 0.5), attrs={"alpha": 0.5}, name="Elu_alpha")
add("Selu", lambda x: f32(1.0507009873554805) * torch.where(
    x > 0, x, f32(1.6732632423543772) * (torch.exp(x) - 1)))  # ONNX's defaults are torch's, rounded
add("Selu", lambda x: f32(1.2) * torch.where(x > 0, x, 1.5 * (torch.exp(x) - 1)),
    attrs={"alpha": 1.5, "gamma": 1.2}, name="Selu_alpha_gamma")
add("Celu", lambda x: F.celu(x, 1.0))
add("Celu", lambda x: F.celu(x, f32(0.8)), attrs={"alpha": 0.8}, name="Celu_alpha")
add("HardSigmoid", hard_sigmoid(f32(0.2), 0.5), xs=[-3.3, -2.1, -1.4, -0.7, 0.25, 1.1, 2.1, 3.2])
add("HardSigmoid", hard_sigmoid(f32(0.4), f32(0.3)), xs=[-2.1, -0.3, 0.6, 1.1, 2.4],
    attrs={"alpha": 0.4, "beta": 0.3}, name="HardSigmoid_alpha_beta")
add("ThresholdedRelu", lambda x: torch.where(x > 1.0, x, 0.0 * x))
add("ThresholdedRelu", lambda x: torch.where(x > 0.5, x, 0.0 * x), attrs={"alpha": 0.5},
    name="ThresholdedRelu_alpha")
add("HardSwish", F.hardswish, xs=[-3.6, -2.1, -1.4, -0.7, 0.25, 1.1, 2.4, 3.5])
add("Mish", F.mish)
add("Shrink", shrink(0.5, 0.0), xs=[-2.1, -0.7, -0.3, 0.25, 0.6, 1.7])
add("Shrink", shrink(f32(0.9), f32(0.4)), xs=[-2.1, -1.2, -0.3, 0.25, 1.1, 1.7],
    attrs={"lambd": 0.9, "bias": 0.4}, name="Shrink_lambd_bias")
add("Gelu", lambda x: F.gelu(x))
add("Gelu", lambda x: F.gelu(x, approximate="tanh"), attrs={"approximate": "tanh"},
    name="Gelu_tanh")
add("Swish", lambda x: x * torch.sigmoid(x))
add("Swish", lambda x: x * torch.sigmoid(f32(1.7) * x), attrs={"alpha": 1.7}, name="Swish_alpha")

with open(OUT, "w") as f:
    f.write('{"generator": "tests/golden/make_unary_golden.py", "torch": "%s",\n "cases": [\n'
            % torch.__version__)
    f.write(",\n".join("  " + json.dumps(c) for c in cases))
    f.write("\n]}\n")
print(f"{len(cases)} cases -> {OUT}")
