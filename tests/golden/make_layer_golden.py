#!/usr/bin/python3
"""Golden forward outputs of the deepwire.layers layers, computed with PyTorch.

Run with /usr/bin/python3 (it has torch, numpy and onnx):

    /usr/bin/python3 tests/golden/make_layer_golden.py

It rewrites tests/golden/layers/: manifest.json and one folder per case holding .npy files.
tests/layers/layers_golden_test.cpp reads them, builds the layer in a deepwire graph, exports it,
replaces each weight initializer `<layer>.<suffix>` with the golden weight of that suffix (the
shapes must match exactly, which also checks the lowering's weight layout), runs the model in the
engine and compares with |got - expected| <= atol + rtol * |expected|.

Weights are written here, in deepwire's layout (the ONNX layout the lowering uses: Dense kernels
are (in, units), Conv kernels (out, in/groups, k...), recurrent weights in ONNX gate order), and
converted to PyTorch's layout to compute the expected output. Inputs and weights are float32; the
reference runs in float64, so the stored output carries no float32 rounding of its own.

How to add a case: call `case(...)` with the layer type, its parameters (as deepwire names them),
the inputs, the weights by suffix, and the expected outputs.
"""
import json
import math
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layers")
RTOL, ATOL = 1e-5, 1e-6
rng = np.random.default_rng(20261122)
cases = []


def rand(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def T(a):
    """A float32 array as a float64 torch tensor (exact)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def case(name, layer, params, inputs, weights, outputs, **extra):
    cases.append(dict(name=name, layer=layer, params=params, inputs=inputs, weights=weights,
                      outputs=outputs, **extra))


def npy(a):
    if isinstance(a, torch.Tensor):
        a = a.detach().numpy()
    return np.array(a, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)


# --- Activations -------------------------------------------------------------------------------

ACT = {
    "linear": lambda x: x,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softmax": lambda x: torch.softmax(x, -1),
    "elu": F.elu,
    "selu": F.selu,
    "softplus": F.softplus,
    "softsign": F.softsign,
    "gelu": F.gelu,  # exact (erf) form
    "swish": F.silu,
    "exponential": torch.exp,
    "hard_sigmoid": F.hardsigmoid,  # relu6(x + 3) / 6, as Keras 3
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),  # Keras 3 activation default slope
}

img = rand(2, 3, 4, 4, lo=-3, hi=3)
for layer, fn in [("Sigmoid", torch.sigmoid), ("TanH", torch.tanh), ("SELU", F.selu),
                  ("SoftPlus", F.softplus), ("SoftSign", F.softsign), ("Swish", F.silu),
                  ("GELU", F.gelu), ("Exponential", torch.exp), ("HardSigmoid", F.hardsigmoid),
                  ("Linear", lambda x: x)]:
    case(layer.lower(), layer, {}, [img], {}, [fn(T(img))])
case("relu", "ReLU", {}, [img], {}, [F.relu(T(img))])
case("relu_max_slope", "ReLU", {"max_value": 0.5, "negative_slope": 0.1}, [img], {},
     [torch.clamp(F.leaky_relu(T(img), 0.1), max=0.5)])
case("relu_threshold", "ReLU", {"threshold": 0.5}, [img], {}, [F.threshold(T(img), 0.5, 0.0)])
case("leaky_relu", "LeakyReLU", {}, [img], {}, [F.leaky_relu(T(img), 0.3)])
case("elu", "ELU", {"alpha": 0.7}, [img], {}, [F.elu(T(img), 0.7)])
case("thresholded_relu", "ThresholdedReLU", {"theta": 0.4}, [img], {},
     [F.threshold(T(img), 0.4, 0.0)])
alpha = rand(3, 1, 1, lo=0, hi=0.5)
case("prelu", "PReLU", {}, [img], {"alpha": alpha}, [F.prelu(T(img), T(alpha.reshape(3)))])
case("softmax_last", "SoftMax", {}, [img], {}, [torch.softmax(T(img), -1)])
case("softmax_axis1", "SoftMax", {"axis": 1}, [img], {}, [torch.softmax(T(img), 1)])

# --- Dense -------------------------------------------------------------------------------------

x2 = rand(3, 5)
k, b = rand(5, 4), rand(4)
case("dense_2d", "Dense", {"units": 4}, [x2], {"kernel": k, "bias": b},
     [F.linear(T(x2), T(k).T, T(b))])
x3 = rand(2, 3, 5)
k, b = rand(5, 6), rand(6)
case("dense_3d_gelu", "Dense", {"units": 6, "activation": "gelu"}, [x3], {"kernel": k, "bias": b},
     [F.gelu(F.linear(T(x3), T(k).T, T(b)))])
k = rand(5, 4)
case("dense_3d_nobias", "Dense", {"units": 4, "use_bias": False}, [x3], {"kernel": k},
     [F.linear(T(x3), T(k).T)])
xa = rand(3, 5, lo=-2, hi=2)
for act, fn in ACT.items():
    if act in ("linear", "gelu"):
        continue
    k, b = rand(5, 3), rand(3)
    case("dense_" + act, "Dense", {"units": 3, "activation": act}, [xa], {"kernel": k, "bias": b},
         [fn(F.linear(T(xa), T(k).T, T(b)))])

# --- Convolutions ------------------------------------------------------------------------------


def same_pads(spatial, k, s, d):
    """TensorFlow/Keras 'same': output = ceil(in / stride), extra padding at the end."""
    pads = []
    for n, kk, ss, dd in zip(spatial, k, s, d):
        out = -(-n // ss)
        total = max((out - 1) * ss + (kk - 1) * dd + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    return pads


def torch_pad(x, pads, value=0.0):
    flat = []
    for b_, e_ in reversed(pads):
        flat += [b_, e_]
    return F.pad(x, flat, value=value)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONVT = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def expand(v, nd):
    return list(v) * nd if len(v) == 1 else list(v)


def conv_case(name, x, filters, kernel, strides=(1,), padding="valid", dilation=(1,), groups=1,
              activation="linear", bias=True):
    nd = x.ndim - 2
    k, s, d = expand(kernel, nd), expand(strides, nd), expand(dilation, nd)
    w = rand(filters, x.shape[1] // groups, *k)
    bb = rand(filters) if bias else None
    xt = T(x)
    if padding == "same":
        xt = torch_pad(xt, same_pads(x.shape[2:], k, s, d))
    y = CONV[nd](xt, T(w), None if bb is None else T(bb), stride=s, dilation=d, groups=groups)
    params = {"filters": filters, "kernel_size": list(kernel), "strides": list(strides),
              "padding": padding, "dilation_rate": list(dilation), "groups": groups,
              "activation": activation, "use_bias": bias}
    weights = {"kernel": w}
    if bias:
        weights["bias"] = bb
    case(name, "Conv%dD" % nd, params, [x], weights, [ACT[activation](y)])


conv_case("conv1d_valid", rand(2, 3, 9), 4, [3])
conv_case("conv1d_same_stride2", rand(2, 3, 9), 4, [4], strides=[2], padding="same")
conv_case("conv2d_valid_stride2", rand(2, 3, 7, 7), 4, [3], strides=[2])
conv_case("conv2d_same_rect", rand(1, 3, 6, 7), 5, [3, 2], strides=[1, 2], padding="same",
          activation="relu")
conv_case("conv2d_groups_dilation", rand(1, 4, 8, 8), 6, [3], dilation=[2], groups=2)
conv_case("conv2d_nobias", rand(1, 2, 5, 5), 3, [3], padding="same", bias=False)
conv_case("conv3d_valid", rand(1, 2, 4, 5, 5), 3, [2, 3, 3])
conv_case("conv3d_same_stride2", rand(1, 2, 5, 5, 5), 2, [3], strides=[2], padding="same")


def conv_transpose_case(name, x, filters, kernel, strides=(1,), padding="valid", dilation=(1,),
                        groups=1):
    nd = x.ndim - 2
    k, s, d = expand(kernel, nd), expand(strides, nd), expand(dilation, nd)
    cin = x.shape[1]
    w = rand(cin, filters // groups, *k)
    bb = rand(filters)
    # Keras output sizes: same -> in * stride; valid -> in * stride + max(k_eff - stride, 0).
    crops, outpad = [], []
    for kk, ss, dd in zip(k, s, d):
        keff = (kk - 1) * dd + 1
        total = keff - ss
        outpad.append(max(-total, 0))
        if total > 0 and padding == "same":
            crops.append((total // 2, total - total // 2))
        else:
            crops.append((0, 0))
    y = CONVT[nd](T(x), T(w), T(bb), stride=s, output_padding=outpad, groups=groups, dilation=d)
    idx = [slice(None), slice(None)] + [slice(b_, y.shape[2 + i] - e_)
                                        for i, (b_, e_) in enumerate(crops)]
    y = y[tuple(idx)]
    params = {"filters": filters, "kernel_size": list(kernel), "strides": list(strides),
              "padding": padding, "dilation_rate": list(dilation), "groups": groups}
    case(name, "Conv%dDTranspose" % nd, params, [x], {"kernel": w, "bias": bb}, [y])


conv_transpose_case("conv1dt_valid_stride2", rand(2, 3, 5), 2, [3], strides=[2])
conv_transpose_case("conv1dt_same_k3_s2", rand(2, 3, 5), 2, [3], strides=[2], padding="same")
conv_transpose_case("conv1dt_k1_s2", rand(2, 3, 5), 2, [1], strides=[2])
conv_transpose_case("conv2dt_same_rect", rand(1, 3, 4, 4), 2, [3, 4], strides=[2],
                    padding="same")
conv_transpose_case("conv2dt_valid_dilation", rand(1, 3, 4, 4), 2, [3], dilation=[2])
conv_transpose_case("conv2dt_groups", rand(1, 4, 3, 3), 4, [2], strides=[2], groups=2)
conv_transpose_case("conv3dt_valid", rand(1, 2, 2, 3, 3), 2, [2])
conv_transpose_case("conv3dt_same_stride2", rand(1, 2, 2, 2, 3), 3, [3], strides=[2],
                    padding="same")


def depthwise_case(name, x, kernel, mult, strides=(1,), padding="valid", dilation=(1,)):
    nd = x.ndim - 2
    k, s, d = expand(kernel, nd), expand(strides, nd), expand(dilation, nd)
    c = x.shape[1]
    w, bb = rand(c * mult, 1, *k), rand(c * mult)
    xt = T(x)
    if padding == "same":
        xt = torch_pad(xt, same_pads(x.shape[2:], k, s, d))
    y = CONV[nd](xt, T(w), T(bb), stride=s, dilation=d, groups=c)
    params = {"kernel_size": list(kernel), "strides": list(strides), "padding": padding,
              "dilation_rate": list(dilation), "depth_multiplier": mult}
    case(name, "DepthwiseConv2D", params, [x], {"depthwise_kernel": w, "bias": bb}, [y])


depthwise_case("depthwise_same_mult2", rand(2, 3, 6, 6), [3], 2, padding="same")
depthwise_case("depthwise_valid_stride2", rand(1, 3, 7, 7), [3, 2], 1, strides=[2])
depthwise_case("depthwise_dilation", rand(1, 2, 7, 7), [3], 1, dilation=[2])


def separable_case(name, x, filters, kernel, mult, strides=(1,), padding="valid", dilation=(1,)):
    nd = x.ndim - 2
    k, s, d = expand(kernel, nd), expand(strides, nd), expand(dilation, nd)
    c = x.shape[1]
    dw = rand(c * mult, 1, *k)
    pw = rand(filters, c * mult, *([1] * nd))
    bb = rand(filters)
    xt = T(x)
    if padding == "same":
        xt = torch_pad(xt, same_pads(x.shape[2:], k, s, d))
    y = CONV[nd](xt, T(dw), None, stride=s, dilation=d, groups=c)
    y = CONV[nd](y, T(pw), T(bb))
    params = {"filters": filters, "kernel_size": list(kernel), "strides": list(strides),
              "padding": padding, "dilation_rate": list(dilation), "depth_multiplier": mult}
    case(name, "SeparableConv%dD" % nd, params, [x],
         {"depthwise_kernel": dw, "pointwise_kernel": pw, "bias": bb}, [y])


separable_case("separable1d_valid", rand(2, 3, 10), 4, [3], 2)
separable_case("separable1d_same_stride2", rand(1, 2, 9), 3, [4], 1, strides=[2], padding="same")
separable_case("separable2d_same_stride2", rand(1, 3, 6, 6), 5, [3], 1, strides=[2],
               padding="same")

# --- Pooling -----------------------------------------------------------------------------------

MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def pool_case(name, x, kind, pool, strides=(), padding="valid"):
    nd = x.ndim - 2
    k = expand(pool, nd)
    s = expand(strides, nd) if strides else k
    xt = T(x)
    pads = same_pads(x.shape[2:], k, s, [1] * nd) if padding == "same" else [(0, 0)] * nd
    if kind == "Max":
        y = MAXPOOL[nd](torch_pad(xt, pads, value=-math.inf), k, s)
    else:
        # Keras averages over the valid positions only (padding not counted).
        total = AVGPOOL[nd](torch_pad(xt, pads), k, s)
        count = AVGPOOL[nd](torch_pad(torch.ones_like(xt), pads), k, s)
        y = total / count
    params = {"pool_size": list(pool), "strides": list(strides), "padding": padding}
    case(name, "%sPool%dD" % (kind, nd), params, [x], {}, [y])


pool_case("maxpool1d_valid", rand(2, 3, 9), "Max", [2])
pool_case("maxpool2d_same_s2", rand(1, 2, 7, 7), "Max", [3], strides=[2], padding="same")
pool_case("maxpool3d_valid", rand(1, 2, 4, 4, 5), "Max", [2])
pool_case("avgpool1d_same_s2", rand(2, 3, 9), "Avg", [3], strides=[2], padding="same")
pool_case("avgpool2d_same_asym", rand(1, 2, 6, 6), "Avg", [3], strides=[2], padding="same")
pool_case("avgpool2d_valid_rect", rand(1, 2, 6, 7), "Avg", [2, 3], strides=[1, 2])
pool_case("avgpool3d_valid", rand(1, 2, 4, 4, 4), "Avg", [2])
for nd, shape in [(1, (2, 3, 7)), (2, (2, 3, 4, 5)), (3, (1, 2, 3, 3, 4))]:
    x = rand(*shape)
    axes = tuple(range(2, 2 + nd))
    case("globalmaxpool%dd" % nd, "GlobalMaxPool%dD" % nd, {}, [x], {}, [T(x).amax(axes)])
    case("globalavgpool%dd" % nd, "GlobalAvgPool%dD" % nd, {}, [x], {}, [T(x).mean(axes)])
x = rand(2, 3, 4, 5)
case("globalavgpool2d_keepdims", "GlobalAvgPool2D", {"keepdims": True}, [x], {},
     [T(x).mean((2, 3), keepdim=True)])
case("globalmaxpool2d_keepdims", "GlobalMaxPool2D", {"keepdims": True}, [x], {},
     [T(x).amax((2, 3), keepdim=True)])

# --- Normalization -----------------------------------------------------------------------------

for name, shape in [("batchnorm_4d", (2, 3, 4, 4)), ("batchnorm_2d", (4, 3)),
                    ("batchnorm_3d", (2, 3, 5))]:
    x = rand(*shape)
    c = shape[1]
    g, bt, mm, mv = rand(c), rand(c), rand(c), rand(c, lo=0.5, hi=2.0)
    case(name, "BatchNormalization", {"epsilon": 0.001}, [x],
         {"gamma": g, "beta": bt, "moving_mean": mm, "moving_variance": mv},
         [F.batch_norm(T(x), T(mm), T(mv), T(g), T(bt), training=False, eps=1e-3)])

# Training mode: normalize with the batch's statistics and update the moving ones. Keras and ONNX
# use momentum as the weight of the old value and the population (biased) batch variance for the
# update; PyTorch's momentum is (1 - that) and its running_var uses the unbiased variance, so the
# update is computed directly here.
x = rand(4, 3, 3, 3, lo=-2, hi=2)
g, bt, mm, mv = rand(3), rand(3), rand(3), rand(3, lo=0.5, hi=2.0)
momentum = 0.9
y = F.batch_norm(T(x), None, None, T(g), T(bt), training=True, eps=1e-3)
xd = T(x)
batch_mean = xd.mean((0, 2, 3))
batch_var = xd.var((0, 2, 3), unbiased=False)
case("batchnorm_training", "BatchNormalization", {"epsilon": 0.001, "momentum": momentum}, [x],
     {"gamma": g, "beta": bt, "moving_mean": mm, "moving_variance": mv},
     [y], training=True,
     training_outputs={"running_mean": npy(T(mm) * momentum + batch_mean * (1 - momentum)),
                       "running_var": npy(T(mv) * momentum + batch_var * (1 - momentum))})

x = rand(2, 5, 4)
g, bt = rand(4), rand(4)
case("layernorm_last", "LayerNormalization", {}, [x], {"gamma": g, "beta": bt},
     [F.layer_norm(T(x), (4,), T(g), T(bt), eps=1e-3)])
g, bt = rand(5, 4), rand(5, 4)
case("layernorm_axis1", "LayerNormalization", {"axis": 1, "epsilon": 1e-5}, [x],
     {"gamma": g, "beta": bt}, [F.layer_norm(T(x), (5, 4), T(g), T(bt), eps=1e-5)])
g = rand(4)
case("layernorm_nocenter", "LayerNormalization", {"center": False}, [x], {"gamma": g},
     [F.layer_norm(T(x), (4,), T(g), None, eps=1e-3)])

# --- Embedding ---------------------------------------------------------------------------------

table = rand(10, 4)
idx = rng.integers(0, 10, (2, 5)).astype(np.int64)
case("embedding_int64", "Embedding", {"input_dim": 10, "output_dim": 4}, [idx],
     {"embeddings": table}, [F.embedding(torch.from_numpy(idx), T(table))])
idx32 = rng.integers(0, 10, (3,)).astype(np.int32)
case("embedding_int32", "Embedding", {"input_dim": 10, "output_dim": 4}, [idx32],
     {"embeddings": table}, [F.embedding(torch.from_numpy(idx32.astype(np.int64)), T(table))])

# --- Recurrent ---------------------------------------------------------------------------------

# PyTorch gate order -> ONNX gate order, as block indices into PyTorch's stacked weights.
GATES = {"LSTM": (4, [0, 3, 1, 2]),  # torch i f g o -> ONNX i o f c
         "GRU": (3, [1, 0, 2]),      # torch r z n   -> ONNX z r h
         "RNN": (1, [0])}


def reorder(w, kind, units):
    _, order = GATES[kind]
    return np.concatenate([w[i * units:(i + 1) * units] for i in order], axis=0)


def recurrent_module(kind, features, units, bidirectional, nonlinearity="tanh"):
    if kind == "LSTM":
        m = torch.nn.LSTM(features, units, batch_first=True, bidirectional=bidirectional)
    elif kind == "GRU":
        m = torch.nn.GRU(features, units, batch_first=True, bidirectional=bidirectional)
    else:
        m = torch.nn.RNN(features, units, batch_first=True, bidirectional=bidirectional,
                         nonlinearity=nonlinearity)
    m = m.double()
    # Fresh float32 values for every parameter, kept as float32 for deepwire.
    values = {}
    for name, p in m.named_parameters():
        values[name] = rand(*p.shape, lo=-0.6, hi=0.6)
        with torch.no_grad():
            p.copy_(T(values[name]))
    dirs = ["", "_reverse"] if bidirectional else [""]
    kernel = np.stack([reorder(values["weight_ih_l0" + d], kind, units) for d in dirs])
    recurrent = np.stack([reorder(values["weight_hh_l0" + d], kind, units) for d in dirs])
    bias = np.stack([np.concatenate([reorder(values["bias_ih_l0" + d], kind, units),
                                     reorder(values["bias_hh_l0" + d], kind, units)])
                     for d in dirs])
    return m, {"kernel": kernel, "recurrent_kernel": recurrent, "bias": bias}


def recurrent_case(name, layer, kind, x, units, return_sequences=False, go_backwards=False,
                   activation="tanh"):
    m, weights = recurrent_module(kind, x.shape[2], units, False, activation)
    xt = T(x)
    if go_backwards:
        xt = xt.flip(1)  # Keras: process backwards and return the sequence in that order
    out, h = m(xt)
    if kind == "LSTM":
        h = h[0]
    y = out if return_sequences else h[-1]
    params = {"units": units, "return_sequences": return_sequences, "go_backwards": go_backwards}
    if kind == "RNN":
        params["activation"] = activation
    case(name, layer, params, [x], weights, [y])


seq = rand(2, 5, 4)
recurrent_case("lstm_last", "LSTM", "LSTM", seq, 3)
recurrent_case("lstm_sequences", "LSTM", "LSTM", seq, 3, return_sequences=True)
recurrent_case("lstm_backwards_sequences", "LSTM", "LSTM", seq, 3, return_sequences=True,
               go_backwards=True)
recurrent_case("lstm_backwards_last", "LSTM", "LSTM", seq, 3, go_backwards=True)
recurrent_case("gru_last", "GRU", "GRU", seq, 3)
recurrent_case("gru_sequences", "GRU", "GRU", seq, 3, return_sequences=True)
recurrent_case("gru_backwards_sequences", "GRU", "GRU", seq, 3, return_sequences=True,
               go_backwards=True)
recurrent_case("simplernn_last", "SimpleRNN", "RNN", seq, 3)
recurrent_case("simplernn_sequences", "SimpleRNN", "RNN", seq, 3, return_sequences=True)
recurrent_case("rnn_relu_sequences", "RNN", "RNN", seq, 3, return_sequences=True,
               activation="relu")
recurrent_case("simplernn_backwards_sequences", "SimpleRNN", "RNN", seq, 3,
               return_sequences=True, go_backwards=True)



def manual_recurrent_case(name, layer, kind, x, units, params, step):
    """Recurrences PyTorch's modules do not cover, written out step by step with weights in
    deepwire's (ONNX) layout: `step(x_t, h, W, R, Wb, Rb)` returns the new state."""
    gates = GATES[kind][0]
    f = x.shape[2]
    w = rand(1, gates * units, f, lo=-0.6, hi=0.6)
    r = rand(1, gates * units, units, lo=-0.6, hi=0.6)
    bias = rand(1, 2 * gates * units, lo=-0.6, hi=0.6)
    W, R = T(w[0]), T(r[0])
    Wb, Rb = T(bias[0, :gates * units]), T(bias[0, gates * units:])
    h = torch.zeros(x.shape[0], units)
    outs = []
    for t in range(x.shape[1]):
        h = step(T(x)[:, t], h, W, R, Wb, Rb)
        outs.append(h)
    y = torch.stack(outs, 1) if params.get("return_sequences") else h
    p = dict(params, units=units)
    case(name, layer, p, [x], {"kernel": w, "recurrent_kernel": r, "bias": bias}, [y])


def gru_reset_before(xt, h, W, R, Wb, Rb):
    """Keras GRU with reset_after=False (ONNX linear_before_reset=0): the reset gate scales the
    state before the recurrent product."""
    u = h.shape[1]
    gx = xt @ W.T + Wb
    z = torch.sigmoid(gx[:, :u] + h @ R[:u].T + Rb[:u])
    r = torch.sigmoid(gx[:, u:2 * u] + h @ R[u:2 * u].T + Rb[u:2 * u])
    cand = torch.tanh(gx[:, 2 * u:] + (r * h) @ R[2 * u:].T + Rb[2 * u:])
    return (1 - z) * cand + z * h


manual_recurrent_case("gru_reset_before_seq", "GRU", "GRU", seq, 3,
                      {"reset_after": False, "return_sequences": True}, gru_reset_before)
manual_recurrent_case("simplernn_sigmoid_last", "SimpleRNN", "RNN", seq, 3,
                      {"activation": "sigmoid"},
                      lambda xt, h, W, R, Wb, Rb: torch.sigmoid(xt @ W.T + Wb + h @ R.T + Rb))

MERGE = {"concat": lambda f, b: torch.cat([f, b], -1), "sum": lambda f, b: f + b,
         "mul": lambda f, b: f * b, "ave": lambda f, b: (f + b) / 2}


def bidirectional_case(name, layer, x, units, merge, return_sequences, activation="tanh"):
    kind = {"SimpleRNN": "RNN"}.get(layer, layer)
    m, weights = recurrent_module(kind, x.shape[2], units, True, activation)
    out, h = m(T(x))
    if kind == "LSTM":
        h = h[0]
    if return_sequences:
        fwd, bwd = out[..., :units], out[..., units:]
    else:
        fwd, bwd = h[0], h[1]
    params = {"layer": layer, "units": units, "merge_mode": merge,
              "return_sequences": return_sequences}
    if kind == "RNN":
        params["activation"] = activation
    case(name, "Bidirectional", params, [x], weights, [MERGE[merge](fwd, bwd)])


bidirectional_case("bidi_lstm_concat_seq", "LSTM", seq, 3, "concat", True)
bidirectional_case("bidi_lstm_mul_last", "LSTM", seq, 3, "mul", False)
bidirectional_case("bidi_gru_sum_last", "GRU", seq, 3, "sum", False)
bidirectional_case("bidi_gru_concat_last", "GRU", seq, 3, "concat", False)
bidirectional_case("bidi_simplernn_ave_seq", "SimpleRNN", seq, 3, "ave", True)
bidirectional_case("bidi_simplernn_relu_concat_seq", "SimpleRNN", seq, 3, "concat", True,
                   activation="relu")



def convlstm_case(name, x, filters, kernel, strides=(1,), padding="valid", dilation=(1,),
                  return_sequences=False, go_backwards=False):
    """Keras ConvLSTM in channels-first layout (batch, time, channels, spatial...), written out
    with PyTorch convolutions; gates in deepwire's (ONNX LSTM) order i, o, f, c."""
    nd = x.ndim - 3
    k, s, d = expand(kernel, nd), expand(strides, nd), expand(dilation, nd)
    c = x.shape[2]
    w = rand(4 * filters, c, *k, lo=-0.5, hi=0.5)
    u = rand(4 * filters, filters, *k, lo=-0.5, hi=0.5)
    bias = rand(1, 4 * filters, lo=-0.5, hi=0.5)
    xs = T(x).flip(1) if go_backwards else T(x)
    h = cell = None
    outs = []
    for t in range(xs.shape[1]):
        xt = xs[:, t]
        if padding == "same":
            xt = torch_pad(xt, same_pads(xt.shape[2:], k, s, d))
        zx = CONV[nd](xt, T(w), T(bias[0]), stride=s, dilation=d)
        if h is None:
            h = torch.zeros(zx.shape[0], filters, *zx.shape[2:])
            cell = torch.zeros_like(h)
        hp = torch_pad(h, same_pads(h.shape[2:], k, [1] * nd, [1] * nd))
        z = zx + CONV[nd](hp, T(u))
        i, o, f, g = torch.split(z, filters, 1)
        cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(cell)
        outs.append(h)
    y = torch.stack(outs, 1) if return_sequences else h
    params = {"filters": filters, "kernel_size": list(kernel), "strides": list(strides),
              "padding": padding, "dilation_rate": list(dilation),
              "return_sequences": return_sequences, "go_backwards": go_backwards}
    case(name, "ConvLSTM%dD" % nd, params, [x],
         {"kernel": w, "recurrent_kernel": u, "bias": bias}, [y])


convlstm_case("convlstm1d_last", rand(2, 4, 3, 7), 2, [3])
convlstm_case("convlstm1d_same_backwards_seq", rand(1, 3, 2, 6), 3, [2], padding="same",
              return_sequences=True, go_backwards=True)
convlstm_case("convlstm2d_seq", rand(2, 3, 2, 5, 5), 2, [3], return_sequences=True)
convlstm_case("convlstm2d_same_stride2", rand(1, 3, 2, 5, 6), 2, [3, 2], strides=[2],
              padding="same")
convlstm_case("convlstm3d_last", rand(1, 2, 2, 3, 4, 4), 2, [2])

# --- Attention ---------------------------------------------------------------------------------


def mha_case(name, q, v, k, heads, key_dim, bias=True):
    """Keras MultiHeadAttention with heads * key_dim = query features, the shape PyTorch's
    nn.MultiheadAttention covers (value_dim = key_dim, output_dim = query features)."""
    e = q.shape[2]
    assert heads * key_dim == e
    kin = v if k is None else k
    mod = torch.nn.MultiheadAttention(e, heads, bias=bias, batch_first=True,
                                      kdim=kin.shape[2], vdim=v.shape[2]).double()
    w = {"query_kernel": rand(e, e), "key_kernel": rand(kin.shape[2], e),
         "value_kernel": rand(v.shape[2], e), "output_kernel": rand(e, e)}
    if bias:
        w.update(query_bias=rand(e), key_bias=rand(e), value_bias=rand(e), output_bias=rand(e))
    with torch.no_grad():
        if mod._qkv_same_embed_dim:
            mod.in_proj_weight.copy_(T(np.concatenate(
                [w["query_kernel"].T, w["key_kernel"].T, w["value_kernel"].T])))
        else:
            mod.q_proj_weight.copy_(T(w["query_kernel"].T))
            mod.k_proj_weight.copy_(T(w["key_kernel"].T))
            mod.v_proj_weight.copy_(T(w["value_kernel"].T))
        mod.out_proj.weight.copy_(T(w["output_kernel"].T))
        if bias:
            mod.in_proj_bias.copy_(T(np.concatenate(
                [w["query_bias"], w["key_bias"], w["value_bias"]])))
            mod.out_proj.bias.copy_(T(w["output_bias"]))
    y, _ = mod(T(q), T(kin), T(v), need_weights=False)
    inputs = [q, v] + ([] if k is None else [k])
    case(name, "MultiHeadAttention",
         {"num_heads": heads, "key_dim": key_dim, "use_bias": bias}, inputs, w, [y])


q = rand(2, 4, 8)
mha_case("mha_cross", q, rand(2, 6, 10), None, 2, 4)
mha_case("mha_key", q, rand(2, 6, 10), rand(2, 6, 6), 4, 2)
mha_case("mha_self", q, q.copy(), None, 2, 4)
mha_case("mha_nobias", q, rand(2, 3, 8), None, 1, 8, bias=False)

qa, va, ka = rand(2, 4, 8), rand(2, 6, 8), rand(2, 6, 8)
scale = np.array(rng.uniform(0.5, 1.5), dtype=np.float32)  # a 0-d weight
scores = torch.matmul(T(qa), T(ka).transpose(1, 2)) * T(scale)
case("attention_scaled", "Attention", {"use_scale": True}, [qa, va, ka], {"scale": scale},
     [torch.matmul(torch.softmax(scores, -1), T(va))])
scores = torch.matmul(T(qa), T(va).transpose(1, 2))
case("attention_self_key", "Attention", {}, [qa, va], {},
     [torch.matmul(torch.softmax(scores, -1), T(va))])
s8 = rand(8)
scores = (T(s8) * torch.tanh(T(qa)[:, :, None, :] + T(ka)[:, None, :, :])).sum(-1)
case("additive_attention", "AdditiveAttention", {}, [qa, va, ka], {"scale": s8},
     [torch.matmul(torch.softmax(scores, -1), T(va))])

# --- Reshaping ---------------------------------------------------------------------------------

x1, x2d, x3d = rand(2, 3, 7), rand(2, 3, 4, 5), rand(1, 2, 3, 4, 3)
case("zeropadding1d", "ZeroPadding1D", {}, [x1], {}, [F.pad(T(x1), [1, 1])])
case("zeropadding1d_asym", "ZeroPadding1D", {"padding": [2, 1]}, [x1], {}, [F.pad(T(x1), [2, 1])])
case("zeropadding2d", "ZeroPadding2D", {"padding": [1, 2, 3, 4]}, [x2d], {},
     [F.pad(T(x2d), [3, 4, 1, 2])])
case("zeropadding3d", "ZeroPadding3D", {"padding": [1, 0, 2]}, [x3d], {},
     [F.pad(T(x3d), [2, 2, 0, 0, 1, 1])])
case("cropping1d", "Cropping1D", {"cropping": [1, 2]}, [x1], {}, [T(x1)[:, :, 1:-2]])
case("cropping2d", "Cropping2D", {"cropping": [1, 0, 2, 1]}, [x2d], {}, [T(x2d)[:, :, 1:, 2:-1]])
case("cropping3d", "Cropping3D", {"cropping": [1]}, [x3d], {}, [T(x3d)[:, :, 1:-1, 1:-1, 1:-1]])
case("upsampling1d", "UpSampling1D", {"size": [3]}, [x1], {},
     [F.interpolate(T(x1), scale_factor=3, mode="nearest")])
case("upsampling2d_nearest", "UpSampling2D", {"size": [2, 3]}, [x2d], {},
     [F.interpolate(T(x2d), scale_factor=(2, 3), mode="nearest")])
case("upsampling2d_bilinear", "UpSampling2D", {"size": [2], "interpolation": "bilinear"}, [x2d],
     {}, [F.interpolate(T(x2d), scale_factor=2, mode="bilinear", align_corners=False)])
case("upsampling3d", "UpSampling3D", {"size": [2, 1, 2]}, [x3d], {},
     [F.interpolate(T(x3d), scale_factor=(2, 1, 2), mode="nearest")])
case("flatten", "Flatten", {}, [x2d], {}, [T(x2d).flatten(1)])
case("reshape", "Reshape", {"target_shape": [4, -1]}, [x2d], {}, [T(x2d).reshape(2, 4, -1)])
case("permute3d", "Permute3D", {"dims": [2, 3, 1]}, [x2d], {}, [T(x2d).permute(0, 2, 3, 1)])
case("dropout_inference", "Dropout", {"rate": 0.3}, [x2d], {}, [T(x2d)])
ya, yb, yc = rand(2, 3, 4), rand(2, 3, 4), rand(2, 3, 4)
case("add", "Add", {}, [ya, yb, yc], {}, [T(ya) + T(yb) + T(yc)])
case("average", "Average", {}, [ya, yb], {}, [(T(ya) + T(yb)) / 2])
case("multiply", "Multiply", {}, [ya, yb, yc], {}, [T(ya) * T(yb) * T(yc)])
case("subtract", "Subtract", {}, [ya, yb], {}, [T(ya) - T(yb)])
case("concatenate", "Concatenate", {"axis": 1}, [ya, yb], {}, [torch.cat([T(ya), T(yb)], 1)])
case("split", "Split", {"num_or_size_splits": 2, "axis": -1}, [ya], {},
     list(torch.split(T(ya), 2, -1)))


# --- GroupNormalization, RMSNormalization, RotaryEmbedding (drawn after the others, so that
# adding them left every earlier case's data as it was) --------------------------------------

x = rand(2, 6, 3, 4, lo=-2, hi=2)
g, bt = rand(6), rand(6)
case("groupnorm_4d", "GroupNormalization", {"groups": 3}, [x], {"gamma": g, "beta": bt},
     [F.group_norm(T(x), 3, T(g), T(bt), eps=1e-3)])
x = rand(2, 4, 5)
g = rand(4)
case("groupnorm_3d_nocenter", "GroupNormalization", {"groups": 2, "center": False,
                                                     "epsilon": 1e-5},
     [x], {"gamma": g}, [F.group_norm(T(x), 2, T(g), None, eps=1e-5)])
x = rand(3, 4, 2, 2)
g, bt = rand(4), rand(4)
case("groupnorm_instance", "GroupNormalization", {"groups": 4}, [x], {"gamma": g, "beta": bt},
     [F.group_norm(T(x), 4, T(g), T(bt), eps=1e-3)])


def rms_norm(x, scale, axis, eps):
    x = T(x)
    shape = [1] * x.dim()
    shape[axis] = -1
    return x / torch.sqrt((x * x).mean(axis, keepdim=True) + eps) * T(scale).reshape(shape)


x = rand(2, 5, 8, lo=-3, hi=3)
sc = rand(8)
case("rmsnorm_last", "RMSNormalization", {}, [x], {"scale": sc}, [rms_norm(x, sc, -1, 1e-6)])
x = rand(2, 5, 4)
sc = rand(5)
case("rmsnorm_axis1", "RMSNormalization", {"axis": 1, "epsilon": 1e-3}, [x], {"scale": sc},
     [rms_norm(x, sc, 1, 1e-3)])


def rotary(x, max_wavelength=10000.0, scaling=1.0, seq_axis=1, feat_axis=-1):
    """keras_hub's RotaryEmbedding: angles position / scaling * max_wavelength^(-2i/d), applied
    as x cos + rotate_half(x) sin, with the frequencies repeated over the two halves."""
    x = T(x)
    xm = torch.movedim(x, (seq_axis % x.dim(), feat_axis % x.dim()), (-2, -1))
    S, D = xm.shape[-2:]
    inverse = 1.0 / (max_wavelength ** (torch.arange(0, D, 2) / D))
    freq = torch.einsum("i,j->ij", torch.arange(S) / scaling, inverse)
    emb = torch.cat([freq, freq], -1)
    turned = torch.cat([-xm[..., D // 2:], xm[..., :D // 2]], -1)
    y = xm * emb.cos() + turned * emb.sin()
    return torch.movedim(y, (-2, -1), (seq_axis % x.dim(), feat_axis % x.dim()))


x = rand(2, 6, 8)
case("rotary_3d", "RotaryEmbedding", {}, [x], {}, [rotary(x)])
x = rand(2, 5, 3, 4)
case("rotary_heads", "RotaryEmbedding", {"max_wavelength": 100.0, "scaling_factor": 2.0}, [x], {},
     [rotary(x, 100.0, 2.0)])
x = rand(2, 6, 7)
case("rotary_channels_first", "RotaryEmbedding", {"sequence_axis": 2, "feature_axis": 1}, [x], {},
     [rotary(x, seq_axis=2, feat_axis=1)])
# The Input declares no sequence length: the angles come from the length at run time.
x = rand(3, 9, 6)
case("rotary_any_length", "RotaryEmbedding", {}, [x], {}, [rotary(x)],
     input_types=["float[N,S,6]"])

# Sequences (batch, steps, features), as MultiHeadAttention takes them: pooled over the steps.
x = rand(2, 7, 5)
case("globalavgpool1d_channels_last", "GlobalAvgPool1D", {"data_format": "channels_last"}, [x], {},
     [T(x).mean(1)])
case("globalmaxpool1d_channels_last_keepdims", "GlobalMaxPool1D",
     {"data_format": "channels_last", "keepdims": True}, [x], {}, [T(x).amax(1, keepdim=True)])
x = rand(2, 3, 4, 5)
case("globalavgpool2d_channels_last", "GlobalAvgPool2D", {"data_format": "channels_last"}, [x], {},
     [T(x).mean((1, 2))])

# Channels last, Keras' default axis: the same statistics over (positions, channels of a group).
x = rand(2, 3, 4, 6, lo=-2, hi=2)
g, bt = rand(6), rand(6)
case("groupnorm_channels_last", "GroupNormalization", {"groups": 3, "axis": -1}, [x],
     {"gamma": g, "beta": bt},
     [F.group_norm(T(x).permute(0, 3, 1, 2), 3, T(g), T(bt), eps=1e-3).permute(0, 2, 3, 1)])


# --- Writing -----------------------------------------------------------------------------------


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    manifest = {"generator": "tests/golden/make_layer_golden.py", "torch": torch.__version__,
                "rtol": RTOL, "atol": ATOL, "cases": []}
    names = set()
    for c in cases:
        assert c["name"] not in names, c["name"]
        names.add(c["name"])
        d = os.path.join(OUT, c["name"])
        os.makedirs(d)

        def save(fname, a, dtype=None):
            a = npy(a)
            if dtype is not None:
                a = a.astype(dtype)
            np.save(os.path.join(d, fname), a)
            return fname

        entry = {"name": c["name"], "layer": c["layer"], "params": c["params"],
                 "inputs": [save("input_%d.npy" % i, a) for i, a in enumerate(c["inputs"])],
                 "weights": {k: save("w_%s.npy" % k, v, np.float32)
                             for k, v in c["weights"].items()},
                 "outputs": [save("output_%d.npy" % i, a, np.float32)
                             for i, a in enumerate(c["outputs"])]}
        if c.get("input_types"):
            entry["input_types"] = c["input_types"]
        if c.get("training"):
            entry["training"] = True
            entry["training_outputs"] = {k: save("train_%s.npy" % k, v, np.float32)
                                         for k, v in c["training_outputs"].items()}
        manifest["cases"].append(entry)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), OUT))


if __name__ == "__main__":
    main()
