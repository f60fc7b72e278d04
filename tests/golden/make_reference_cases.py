#!/usr/bin/python3
"""Reference cases for the com.microsoft operators that ONNX Runtime runs only on its GPU
(BiasAdd, BiasSplitGelu, ComplexMul, ComplexMulConj, FusedMatMulActivation, GemmFastGelu,
GroupNorm, SkipGroupNorm, TorchEmbedding, RemovePadding, RestorePadding, ReduceSumInteger,
BiasDropout, GemmaRotaryEmbedding, RelativePositionBias, BiasSoftmax, BitmaskDropout,
BitmaskBiasDropout, NhwcConv, NhwcFusedConv, Rfft, Irfft, SparseAttention (whose CPU kernel needs
past and present in one buffer), LongformerAttention, DecoderAttention, GatedRelativePositionBias, PackedAttention, PackedMultiHeadAttention,
QuantizeBFP and DequantizeBFP (which it declares without a kernel or a byte layout: the layout is
deepwire's, engine/kernels/bfp.cpp), QuantizeWithOrder, DequantizeWithOrder, QOrderedMatMul, QOrderedGelu, QOrderedLayerNormalization,
QOrderedAttention, QOrderedLongformerAttention, SparseToDenseMatMul (whose sparse A ONNX Runtime's
Node.js binding cannot feed), GemmFloat8 (its float and float16 forms), MoE's
forms its CPU kernel refuses (fc3 gating, swiglu with concatenated halves), and MulInteger,
which it does not run at all): their outputs
computed here in float64 with numpy (integer outputs exact),
from each operator's definition, in the ONNX backend-test layout (ref-contrib/<case>/model.onnx,
test_data_set_0/input_N.pb and output_N.pb). tests/engine/microsoft_ops_test.cpp runs them, as
does `deepwire conformance --data tests/golden --suite ref-contrib`.

Usage: /usr/bin/python3 tests/golden/make_reference_cases.py
"""
import itertools
import math
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "ref-contrib")
rng = np.random.default_rng(23)
ELEM = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
        np.float16: TensorProto.FLOAT16, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
        np.bool_: TensorProto.BOOL, np.uint32: TensorProto.UINT32}
erf = np.vectorize(math.erf)


def case(name, op, inputs, outputs, **attrs):
    """inputs: (name, array) pairs, "" for an omitted optional input; outputs: (name, float64,
    int32, int8, uint8, bool or float16 array) pairs, float64 stored as float32."""
    given = [(n, a) for n, a in inputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs],
                            domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, ELEM[a.dtype.type], a.shape) for n, a in given],
        [helper.make_tensor_value_info(n, ELEM.get(a.dtype.type, TensorProto.FLOAT), a.shape)
         for n, a in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(given):
        open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb").write(
            numpy_helper.from_array(a, n).SerializeToString())
    for i, (n, a) in enumerate(outputs):
        open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb").write(
            numpy_helper.from_array(a if a.dtype in (np.int32, np.float16, np.bool_, np.uint32,
                                                     np.int8, np.uint8, np.int64)
                                    else a.astype(np.float32), n).SerializeToString())


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def d(a):
    return a.astype(np.float64)


def gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def fast_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def group_norm(x, gamma, beta, groups, eps, silu, channels_last):
    x = d(x)
    if channels_last:
        x = x.transpose(0, 3, 1, 2)
    n, c, h, w = x.shape
    g = x.reshape(n, groups, -1)
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    y = g.reshape(n, c, h, w) * d(gamma)[:, None, None] + d(beta)[:, None, None]
    if silu:
        y = y / (1 + np.exp(-y))
    return y.transpose(0, 2, 3, 1) if channels_last else y


def complex_mul(a, b, conj):
    a, b = d(a), d(b)
    ar, ai, br, bi = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    if conj:
        return np.stack([ar * br + ai * bi, ai * br - ar * bi], -1)
    return np.stack([ar * br - ai * bi, ar * bi + ai * br], -1)


def conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), group=1):
    """NCHW convolution in float64, pads as ONNX's (top, left, bottom, right)."""
    x = np.pad(d(x), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    per = m // group
    for o in range(m):
        g = o // per
        for i in range(oh):
            for j in range(ow):
                win = x[:, g * cg:(g + 1) * cg, i * strides[0]:i * strides[0] + kh,
                        j * strides[1]:j * strides[1] + kw]
                y[:, o, i, j] = (win * d(w[o])).sum(axis=(1, 2, 3))
    if b is not None:
        y += d(b)[None, :, None, None]
    return y


def softmax_from(x, axis):
    """Softmax over the axes from `axis` on, taken together."""
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


def complex_last(z):
    return np.stack([z.real, z.imag], axis=-1)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    x, bias, skip = f32(2, 3, 8), f32(8), f32(2, 3, 8)
    case("biasadd", "BiasAdd", [("X", x), ("bias", bias), ("skip", skip)],
         [("Y", d(x) + d(bias) + d(skip))])
    xs, bs = f32(2, 3, 12), f32(12)
    s = d(xs) + d(bs)
    case("biassplitgelu", "BiasSplitGelu", [("X", xs), ("bias", bs)],
         [("Y", s[..., :6] * gelu(s[..., 6:]))])
    a, b = f32(2, 3, 2), f32(3, 2)
    case("complexmul_broadcast", "ComplexMul", [("A", a), ("B", b)],
         [("C", complex_mul(a, b, False))])
    a, b = f32(4, 2), f32(4, 2)
    case("complexmulconj", "ComplexMulConj", [("A", a), ("B", b)],
         [("C", complex_mul(a, b, True))])
    a, b = f32(2, 3, 5), f32(2, 4, 5)
    mm = 0.5 * d(a) @ d(b).transpose(0, 2, 1)
    case("fusedmatmulactivation_leakyrelu_transb", "FusedMatMulActivation",
         [("A", a), ("B", b)], [("Y", np.where(mm > 0, mm, 0.2 * mm))], activation="LeakyRelu",
         activation_alpha=0.2, alpha=0.5, transB=1)
    xg, wg, bg = f32(3, 6), f32(6, 5), f32(5)
    case("gemmfastgelu_bias", "GemmFastGelu", [("X", xg), ("W", wg), ("bias", bg)],
         [("Y", fast_gelu(d(xg) @ d(wg) + d(bg)))])
    case("gemmfastgelu", "GemmFastGelu", [("X", xg), ("W", wg)],
         [("Y", fast_gelu(d(xg) @ d(wg)))])
    xn, gamma, beta = f32(2, 3, 4, 8, lo=-2, hi=2), f32(8, lo=0.5, hi=1.5), f32(8)
    case("groupnorm_nhwc_silu", "GroupNorm", [("X", xn), ("gamma", gamma), ("beta", beta)],
         [("Y", group_norm(xn, gamma, beta, 4, 1e-5, True, True))], groups=4, activation=1)
    xc = f32(2, 6, 3, 4, lo=-2, hi=2)
    g6, b6 = f32(6, lo=0.5, hi=1.5), f32(6)
    case("groupnorm_nchw", "GroupNorm", [("X", xc), ("gamma", g6), ("beta", b6)],
         [("Y", group_norm(xc, g6, b6, 3, 1e-3, False, False))], groups=3, activation=0,
         channels_last=0, epsilon=1e-3)
    sk, sb = f32(2, 1, 1, 8), f32(8)
    total = d(xn) + d(sk) + d(sb)
    case("skipgroupnorm_bias_sum", "SkipGroupNorm",
         [("X", xn), ("gamma", gamma), ("beta", beta), ("skip", sk), ("bias", sb)],
         [("Y", group_norm(total, gamma, beta, 2, 1e-5, True, True)), ("S", total)], groups=2,
         activation=1)
    weight, idx = f32(7, 3), np.array([[0, 6, 2], [2, 2, 5]], np.int64)
    case("torchembedding", "TorchEmbedding", [("weight", weight), ("indices", idx)],
         [("Y", d(weight)[idx])])
    seq = f32(3, 4, 2)
    counts = np.array([2, 4, 1], np.int32)
    valid = np.arange(4)[None, :] < counts[:, None]
    cells = np.arange(12).reshape(3, 4)
    offsets = np.concatenate([cells[valid], cells[~valid]]).reshape(3, 4).astype(np.int32)
    packed = d(seq).reshape(12, 2)[cells[valid]]
    case("removepadding", "RemovePadding", [("input", seq), ("sequence_token_count", counts)],
         [("output", packed), ("token_offset", offsets),
          ("cumulated_seq_len", np.array([0, 2, 6, 7], np.int32)),
          ("max_seq_len", np.array([4], np.int32))])
    restored = np.zeros((12, 2))
    restored[cells[valid]] = packed
    case("restorepadding", "RestorePadding",
         [("input", packed.astype(np.float32)), ("token_offset", offsets)],
         [("output", restored.reshape(3, 4, 2))])
    q8 = rng.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    case("reducesuminteger", "ReduceSumInteger", [("data", q8)],
         [("reduced", q8.astype(np.int32).sum(axis=(0, 2), keepdims=True).astype(np.int32))], axes=[0, 2],
         keepdims=1)
    u8 = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    case("reducesuminteger_uint8_drop", "ReduceSumInteger", [("data", u8)],
         [("reduced", u8.astype(np.int32).sum(axis=1).astype(np.int32))], axes=[1], keepdims=0)
    data, bias, res = f32(2, 3, 4), f32(4), f32(2, 3, 4)
    case("biasdropout_inference", "BiasDropout",
         [("data", data), ("bias", bias), ("residual", res), ("ratio", np.array(0.5, np.float32)),
          ("training_mode", np.array(False))],
         [("output", d(data) + d(bias) + d(res)), ("mask", np.ones((2, 3, 4), np.bool_))])
    emb = f32(2, 3, 8, lo=-3, hi=3)
    qh, qr, kh, kr = (f32(2, 2, 3, 8).astype(np.float16) for _ in range(4))
    c, s = np.cos(d(emb))[:, None], np.sin(d(emb))[:, None]
    case("gemmarotaryembedding", "GemmaRotaryEmbedding",
         [("emb", emb), ("q", qh), ("q_rot", qr), ("k", kh), ("k_rot", kr)],
         [("output1", (d(qh) * c + d(qr) * s).astype(np.float16)),
          ("output2", (d(kh) * c + d(kr) * s).astype(np.float16))])
    for both, name in ((0, "relativepositionbias"), (1, "relativepositionbias_bidirectional")):
        table = f32(16, 3)
        q_len, k_len, max_distance = 5, 40, 64
        rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
        buckets = 16 // 2 if both else 16
        offset = (rel > 0) * buckets if both else 0
        n = np.abs(rel) if both else -np.minimum(rel, 0)
        max_exact = buckets // 2
        large = max_exact + np.floor(np.log(np.maximum(n, 1) / max_exact) /
                                     np.log(max_distance / max_exact) *
                                     (buckets - max_exact)).astype(np.int64)
        bucket = np.where(n < max_exact, n, np.minimum(large, buckets - 1)) + offset
        case(name, "RelativePositionBias",
             [("bias_table", table), ("query_length", np.array([q_len], np.int64)),
              ("key_length", np.array([k_len], np.int64))],
             [("output", d(table)[bucket].transpose(2, 0, 1)[None])],
             max_distance=max_distance, is_bidirectional=both)
    a8, b8 = rng.integers(0, 256, (2, 3)).astype(np.uint8), rng.integers(0, 256, (3,)).astype(np.uint8)
    case("mulinteger_broadcast", "MulInteger",
         [("A", a8), ("A_zero_point", np.array(100, np.uint8)), ("B", b8),
          ("B_zero_point", np.array(7, np.uint8))],
         [("C", ((a8.astype(np.int32) - 100) * (b8.astype(np.int32) - 7)).astype(np.int32))])
    i8 = rng.integers(-128, 128, (4,)).astype(np.int8)
    case("mulinteger_int8_nozp", "MulInteger", [("A", i8), ("", None), ("B", i8)],
         [("C", (i8.astype(np.int32) ** 2).astype(np.int32))])
    data = f32(3, 2, 4, 5, lo=-3, hi=3)
    bias = f32(3, 1, 4, 5, lo=-3, hi=3)
    case("biassoftmax_inner", "BiasSoftmax", [("data", data), ("bias", bias)],
         [("output", softmax_from(d(data) + d(bias), 2))], axis=2, is_inner_broadcast=1)
    bias_outer = f32(4, 5, lo=-3, hi=3)
    case("biassoftmax_outer_negative_axis", "BiasSoftmax", [("data", data), ("bias", bias_outer)],
         [("output", softmax_from(d(data) + d(bias_outer), 3))], axis=-1, is_inner_broadcast=0)
    x33 = f32(3, 11)
    case("bitmaskdropout_inference", "BitmaskDropout",
         [("data", x33), ("ratio", np.array(0.3, np.float32)), ("training_mode", np.array(False))],
         [("output", d(x33)), ("mask", np.full(2, 0xFFFFFFFF, np.uint32))])
    case("bitmaskdropout_training_ratio_zero", "BitmaskDropout",
         [("data", x33), ("ratio", np.array(0.0, np.float32)), ("training_mode", np.array(True))],
         [("output", d(x33)), ("mask", np.full(2, 0xFFFFFFFF, np.uint32))])
    bd, bb, br = f32(2, 40), f32(40), f32(2, 40)
    case("bitmaskbiasdropout_residual", "BitmaskBiasDropout",
         [("data", bd), ("bias", bb), ("residual", br)],
         [("output", d(bd) + d(bb) + d(br)), ("mask", np.full(3, 0xFFFFFFFF, np.uint32))])
    xn = f32(2, 5, 6, 3)
    wn = f32(4, 3, 3, 3)  # [M, kH, kW, C]
    bn = f32(4)
    y = conv2d(xn.transpose(0, 3, 1, 2), wn.transpose(0, 3, 1, 2), bn, (2, 2), (1, 1, 1, 0))
    case("nhwcconv_bias_strides_pads", "NhwcConv", [("X", xn), ("W", wn), ("B", bn)],
         [("Y", y.transpose(0, 2, 3, 1))], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 0])
    xg, wg = f32(1, 4, 4, 6), f32(6, 2, 2, 2)  # 3 groups of 2 channels
    y = conv2d(xg.transpose(0, 3, 1, 2), wg.transpose(0, 3, 1, 2), group=3)
    case("nhwcconv_group", "NhwcConv", [("X", xg), ("W", wg)], [("Y", y.transpose(0, 2, 3, 1))],
         group=3)
    z = f32(2, 3, 3, 4)
    y = conv2d(xn.transpose(0, 3, 1, 2), wn.transpose(0, 3, 1, 2), bn, (2, 2), (1, 1, 1, 0))
    case("nhwcfusedconv_z_relu", "NhwcFusedConv", [("X", xn), ("W", wn), ("B", bn), ("Z", z)],
         [("Y", np.maximum(y.transpose(0, 2, 3, 1) + d(z), 0))], kernel_shape=[3, 3],
         strides=[2, 2], pads=[1, 1, 1, 0], activation="Relu")
    y = conv2d(xn.transpose(0, 3, 1, 2), wn.transpose(0, 3, 1, 2))
    case("nhwcfusedconv_clip", "NhwcFusedConv", [("X", xn), ("W", wn)],
         [("Y", np.clip(y.transpose(0, 2, 3, 1), -0.5, 0.6))], activation="Clip",
         activation_params=[-0.5, 0.6])
    sig = f32(2, 3, 8)
    case("rfft_1d", "Rfft", [("X", sig)], [("Y", complex_last(np.fft.rfft(d(sig))))])
    case("rfft_whole_spectrum", "Rfft", [("X", sig)], [("Y", complex_last(np.fft.fft(d(sig))))],
         onesided=0)
    img = f32(2, 4, 6)
    case("rfft_2d_normalized", "Rfft", [("X", img)],
         [("Y", complex_last(np.fft.rfft2(d(img), norm="ortho")))], signal_ndim=2, normalized=1)
    half = f32(2, 5, 2)
    zh = d(half)[..., 0] + 1j * d(half)[..., 1]
    case("irfft_1d", "Irfft", [("X", half)], [("Y", np.fft.irfft(zh, n=9))], signal_ndim=1)
    half2 = f32(3, 4, 5, 2)
    zh2 = d(half2)[..., 0] + 1j * d(half2)[..., 1]
    case("irfft_2d_normalized", "Irfft", [("X", half2)],
         [("Y", np.fft.irfft2(zh2, s=(4, 9), norm="ortho"))], signal_ndim=2, normalized=1)
    whole = f32(2, 6, 2)
    case("irfft_whole_spectrum", "Irfft", [("X", whole)],
         [("Y", np.fft.ifft(d(whole)[..., 0] + 1j * d(whole)[..., 1]).real)], signal_ndim=1,
         onesided=0)
    B, S, N, H, D = 2, 3, 2, 4, 6
    ql, qb = f32(B, S, N * H), f32(N * H)
    rel, wq, bq, eco = f32(1, N, S, S), f32(H, D), f32(D), f32(1, N, 1, 1)

    def gated(qpad):
        q = qpad.reshape(B, S, N, H).transpose(0, 2, 1, 3)
        g = q @ d(wq) + d(bq)
        sums = g.reshape(B, N, S, 2, D // 2).sum(-1)
        u, r = 1 / (1 + np.exp(-sums[..., :1])), 1 / (1 + np.exp(-sums[..., 1:]))
        return (u * (r * d(eco) - 1) + 2) * d(rel)
    common = [("rel_pos", rel), ("weight", wq), ("bias", bq), ("eco_a", eco)]
    case("gatedrelativepositionbias", "GatedRelativePositionBias",
         [("query_layer", ql), ("query_bias", qb)] + common,
         [("output", gated(d(ql) + d(qb)))], num_heads=N)
    # Lengths 2 and 3 of 3: cells 0, 1 and 3, 4, 5 hold the tokens, cell 2 is padding.
    places = np.array([0, 1, 3, 4, 5, 2], np.int32)
    packed = f32(5, N * H)
    qpad = np.tile(d(qb), (B * S, 1))
    qpad[places[:5]] += d(packed)
    case("gatedrelativepositionbias_packed", "GatedRelativePositionBias",
         [("query_layer", packed), ("query_bias", qb)] + common +
         [("token_offset", places.reshape(B, S))],
         [("output", gated(qpad.reshape(B, S, N * H)))], num_heads=N)
    E, HID, INTER = 3, 4, 5
    xr, router = f32(5, HID), f32(5, E, lo=-2, hi=2)

    def moe(x, fc1, fc2, k, act, fc3=None, normalize=False):
        logits = d(router)
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        out = np.zeros((x.shape[0], HID))
        for r in range(x.shape[0]):
            top = np.argsort(-p[r], kind="stable")[:k]
            w = p[r, top] / (p[r, top].sum() if normalize else 1)
            for e, we in zip(top, w):
                out[r] += we * (act(d(x[r]) @ d(fc1[e]).T, None if fc3 is None
                                    else d(x[r]) @ d(fc3[e]).T) @ d(fc2[e]).T)
        return out
    silu = lambda a, g: a / (1 + np.exp(-a)) * g  # noqa: E731
    fc1, fc2, fc3 = f32(E, INTER, HID), f32(E, HID, INTER), f32(E, INTER, HID)
    case("moe_silu_fc3_gated", "MoE",
         [("input", xr), ("router_probs", router), ("fc1_experts_weights", fc1), ("", None),
          ("fc2_experts_weights", fc2), ("", None), ("fc3_experts_weights", fc3)],
         [("output", moe(xr, fc1, fc2, 2, silu, fc3, True))], k=2, activation_type="silu",
         normalize_routing_weights=1)
    fc1h = f32(E, 2 * INTER, HID)

    def swiglu_halves(h, _):
        gate, linear = h[:INTER], h[INTER:]
        return gate / (1 + np.exp(-1.5 * gate)) * (linear + 0.5)
    case("moe_swiglu_halves", "MoE",
         [("input", xr), ("router_probs", router), ("fc1_experts_weights", fc1h), ("", None),
          ("fc2_experts_weights", fc2)],
         [("output", moe(xr, fc1h, fc2, 1, swiglu_halves))], activation_type="swiglu",
         swiglu_fusion=2, activation_alpha=1.5, activation_beta=0.5)
    # Packed attention: lengths 3 and 2 of 4; cells 0-2 and 4-5 hold the tokens.
    B, S, NH = 2, 4, 2
    lengths = [3, 2]
    cells = np.array([0, 1, 2, 4, 5])
    offsets = np.array([0, 1, 2, 4, 5, 3, 6, 7], np.int32).reshape(B, S)
    cum = np.array([0, 3, 5], np.int32)

    def attend(q, k, v, scale=None, bias=None):
        """q, k [B, S, heads * size], v [B, S, heads * vsize]: each sequence's own keys."""
        out = np.zeros((B, S, v.shape[2]))
        hs, vs = q.shape[2] // NH, v.shape[2] // NH
        sc = scale if scale is not None else 1 / math.sqrt(hs)
        for bi in range(B):
            for h in range(NH):
                qh, kh = q[bi, :, h * hs:(h + 1) * hs], k[bi, :, h * hs:(h + 1) * hs]
                vh = v[bi, :, h * vs:(h + 1) * vs]
                scores = qh @ kh.T * sc
                if bias is not None:
                    scores = scores + d(bias)[min(bi, bias.shape[0] - 1), h]
                scores[:, lengths[bi]:] = -np.inf
                e = np.exp(scores - scores.max(1, keepdims=True))
                out[bi, :, h * vs:(h + 1) * vs] = (e / e.sum(1, keepdims=True)) @ vh
        return out.reshape(B * S, -1)[cells]

    def padded(packed):
        rows = np.zeros((B * S,) + packed.shape[1:])
        rows[cells] = d(packed)
        return rows.reshape((B, S) + packed.shape[1:])
    xp, wqkv, bqkv = f32(5, 8), f32(8, 24), f32(24)
    qkv = padded(xp) @ d(wqkv) + d(bqkv)
    case("packedattention", "PackedAttention",
         [("input", xp), ("weights", wqkv), ("bias", bqkv), ("token_offset", offsets),
          ("cumulative_sequence_length", cum)],
         [("output", attend(qkv[..., :8], qkv[..., 8:16], qkv[..., 16:]))], num_heads=NH)
    w2, b2, ab = f32(8, 22), f32(22), f32(1, NH, S, S)
    qkv2 = padded(xp) @ d(w2) + d(b2)
    case("packedattention_sizes_bias", "PackedAttention",
         [("input", xp), ("weights", w2), ("bias", b2), ("token_offset", offsets),
          ("cumulative_sequence_length", cum), ("attention_bias", ab)],
         [("output", attend(qkv2[..., :8], qkv2[..., 8:16], qkv2[..., 16:], bias=ab))],
         num_heads=NH, qkv_hidden_sizes=[8, 8, 6])
    qp, kp, vp, bp = f32(5, 8), f32(5, 8), f32(5, 6), f32(22)
    case("packedmultiheadattention_bias_scale", "PackedMultiHeadAttention",
         [("query", qp), ("key", kp), ("value", vp), ("bias", bp), ("token_offset", offsets),
          ("cumulative_sequence_length", cum)],
         [("output", attend(padded(qp) + d(bp[:8]), padded(kp) + d(bp[8:16]),
                            padded(vp) + d(bp[16:]), scale=0.3))], num_heads=NH, scale=0.3)
    packed_qkv = f32(5, NH, 3, 4)
    pq = padded(packed_qkv)  # [B, S, heads, 3, size]
    case("packedmultiheadattention_packed_qkv", "PackedMultiHeadAttention",
         [("query", packed_qkv), ("", None), ("", None), ("", None), ("token_offset", offsets),
          ("cumulative_sequence_length", cum)],
         [("output", attend(*(pq[:, :, :, i].reshape(B, S, -1) for i in range(3))))],
         num_heads=NH)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


# cuBLASLt's matrix orders, as the order_* attributes number them.
ORDER_COL, ORDER_ROW, ORDER_COL32, ORDER_COL4_4R2_8C, ORDER_COL32_2R_4R4 = range(5)


def order_offsets(order, rows, cols):
    """Where element (r, c) of one rows x cols matrix lies in its order's buffer. The tiled orders
    keep 32-column panels one after another, each panel rows * 32 long (rows a multiple of 8 for
    COL4_4R2_8C and of 32 for COL32_2R_4R4, which ORT demands)."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    panel = (c // 32) * 32 * rows
    if order == ORDER_ROW:
        return r * cols + c
    if order == ORDER_COL:
        return c * rows + r
    if order == ORDER_COL32:
        return panel + r * 32 + c % 32
    if order == ORDER_COL4_4R2_8C:
        # 8-row x 32-column tiles; even rows fill the tile's first half, odd rows the second, in
        # 4 x 4 blocks of (row pair index, 4 columns) that run along the columns.
        return (panel + (r // 8) * 256 + (r % 2) * 128 + (c % 32 // 4) * 16 + (r % 8 // 2) * 4
                + c % 4)
    t = r % 32  # COL32_2R_4R4: 32 x 32 tiles, rows interleaved as cuBLASLt documents
    return panel + (r // 32) * 1024 + (((t % 8) // 2 * 4 + t // 8) * 2 + t % 2) * 32 + c % 32


def to_order(x, order):
    """x [..., rows, cols] in row-major order, rearranged into `order`; same shape, new bytes."""
    rows, cols = x.shape[-2:]
    flat = x.reshape(-1, rows * cols)
    out = np.empty_like(flat)
    out[:, order_offsets(order, rows, cols).ravel()] = flat
    return out.reshape(x.shape)


def quantize_s8(x, scale):
    """ORT's quantizing kernels multiply by the float32 reciprocal of the scale, in float32,
    clamp to [-128, 127] and round half to even."""
    inv = np.float32(1) / np.float32(scale)
    return np.rint(np.clip(x.astype(np.float32) * inv, -128, 127)).astype(np.int8)


def settled(v, margin=1e-3):
    """True when no value that int8 rounding keeps lies within `margin` of a rounding tie, so
    that float32 and float64 arithmetic round every element the same way."""
    inside = (v > -128.5) & (v < 127.5)
    return bool(np.all(np.abs(np.abs(v - np.floor(v)) - 0.5)[inside] > margin))


def sat_round(v):
    return np.rint(np.clip(v, -128, 127)).astype(np.int8)


def main_ordered():
    r = np.random.default_rng(31)
    # Exact ties (x / scale = k + 1/2) pin round-half-to-even; values past +-128 pin saturation.
    ties = np.array([0.125, 0.375, -0.125, -0.375, 0.625, -0.625, 40.0, -40.0], np.float32)
    x = r.uniform(-20, 20, (2, 3, 64)).astype(np.float32)
    x.reshape(-1)[:8] = ties
    case("quantizewithorder_row_to_col32", "QuantizeWithOrder",
         [("input", x), ("scale_input", np.array(0.25, np.float32))],
         [("output", to_order(quantize_s8(x, 0.25), ORDER_COL32))], order_input=ORDER_ROW,
         order_output=ORDER_COL32)
    xh = r.uniform(-70, 70, (3, 4, 8)).astype(np.float16)
    xh.reshape(-1)[:8] = ties * 2
    case("quantizewithorder_float16_row", "QuantizeWithOrder",
         [("input", xh), ("scale_input", np.array(0.5, np.float32))],
         [("output", quantize_s8(xh, 0.5))], order_input=ORDER_ROW, order_output=ORDER_ROW)
    x8 = r.uniform(-3, 3, (2, 16, 64)).astype(np.float32)
    case("quantizewithorder_row_to_col4_4r2_8c", "QuantizeWithOrder",
         [("input", x8), ("scale_input", np.array(0.03, np.float32))],
         [("output", to_order(quantize_s8(x8, 0.03), ORDER_COL4_4R2_8C))], order_input=ORDER_ROW,
         order_output=ORDER_COL4_4R2_8C)
    x32 = r.uniform(-3, 3, (32, 64)).astype(np.float32)
    case("quantizewithorder_row_to_col32_2r_4r4", "QuantizeWithOrder",
         [("input", x32), ("scale_input", np.array(0.03, np.float32))],
         [("output", to_order(quantize_s8(x32, 0.03), ORDER_COL32_2R_4R4))],
         order_input=ORDER_ROW, order_output=ORDER_COL32_2R_4R4)
    q = r.integers(-128, 128, (2, 5, 64)).astype(np.int8)
    case("dequantizewithorder_col32_to_row", "DequantizeWithOrder",
         [("input", to_order(q, ORDER_COL32)), ("scale_input", np.array(0.0375, np.float32))],
         [("output", d(q) * d(np.float32(0.0375)))], order_input=ORDER_COL32,
         order_output=ORDER_ROW, to=TensorProto.FLOAT)
    # A scale that float16 holds exactly: the COL32 float16 path multiplies in float16, the ROW
    # one in float32, and both then agree with this.
    q4 = r.integers(-128, 128, (3, 4, 8)).astype(np.int8)
    case("dequantizewithorder_row_float16", "DequantizeWithOrder",
         [("input", q4), ("scale_input", np.array(0.0390625, np.float32))],
         [("output", (d(q4) * 0.0390625).astype(np.float16))], order_input=ORDER_ROW,
         order_output=ORDER_ROW, to=TensorProto.FLOAT16)

    # QOrderedMatMul: A row-major, B [K, N] held column by column, Y row-major;
    # Y = sat(round(sA * sB / sY * (A @ B) + bias + sC / sY * C)), the bias in Y's units.
    M, K, N = 5, 16, 8
    sa, sb, sy, sc = (np.float32(v) for v in (0.05, 0.02, 0.4, 0.3))
    alpha, beta = d(np.float32(sa * sb / sy)), d(np.float32(sc / sy))
    while True:
        a = r.integers(-128, 128, (2, M, K)).astype(np.int8)
        b = r.integers(-128, 128, (K, N)).astype(np.int8)
        bias = r.uniform(-8, 8, N).astype(np.float32)
        c = r.integers(-128, 128, (2, M, N)).astype(np.int8)
        acc = np.matmul(a.astype(np.int64), b.astype(np.int64))
        y = alpha * acc + d(bias) + beta * d(c)
        if settled(y) and settled(alpha * acc):
            break
    b_col = b.T.copy().reshape(K, N)  # shape [K, N], bytes column-major
    case("qorderedmatmul_bias_c", "QOrderedMatMul",
         [("A", a), ("scale_A", np.array(sa)), ("B", b_col), ("scale_B", np.array(sb)),
          ("scale_Y", np.array(sy)), ("bias", bias), ("C", c), ("scale_C", np.array(sc))],
         [("Y", sat_round(y))], order_A=ORDER_ROW, order_B=ORDER_COL, order_Y=ORDER_ROW)
    case("qorderedmatmul", "QOrderedMatMul",
         [("A", a[0]), ("scale_A", np.array(sa)), ("B", b_col), ("scale_B", np.array(sb)),
          ("scale_Y", np.array(sy))],
         [("Y", sat_round(alpha * acc[0]))], order_A=ORDER_ROW, order_B=ORDER_COL,
         order_Y=ORDER_ROW)

    # QOrderedGelu looks each of the 256 codes up in a table built with float32 math.
    sx, sgy = np.float32(0.0625), np.float32(0.025)
    codes = np.arange(-128, 128)
    v = d(np.float32(1) / sgy) * gelu(d(sx) * codes)
    assert settled(v)
    xg = r.integers(-128, 128, (2, 3, 8)).astype(np.int8)
    case("qorderedgelu", "QOrderedGelu",
         [("X", xg), ("scale_X", np.array(sx)), ("scale_Y", np.array(sgy))],
         [("Y", sat_round(v[xg.astype(np.int64) + 128]))], order_X=ORDER_ROW, order_Y=ORDER_ROW)

    # QOrderedLayerNormalization: [batch, rows, cols] only, over the last axis, population
    # variance, gamma and beta in float or float16.
    def q_layer_norm(xq, scale_x, gamma, beta, scale_y, eps):
        xs = d(xq) * d(scale_x)
        mu = xs.mean(-1, keepdims=True)
        var = ((xs - mu) ** 2).mean(-1, keepdims=True)
        yv = (xs - mu) / np.sqrt(var + eps) * d(gamma) + (0 if beta is None else d(beta))
        return yv * d(np.float32(1) / np.float32(scale_y))
    for name, ftype, with_beta in (("qorderedlayernormalization", np.float32, True),
                                   ("qorderedlayernormalization_float16_nobeta", np.float16,
                                    False)):
        while True:
            xl = r.integers(-128, 128, (2, 3, 32)).astype(np.int8)
            gam = r.uniform(0.5, 1.5, 32).astype(ftype)
            bet = r.uniform(-0.5, 0.5, 32).astype(ftype) if with_beta else None
            yl = q_layer_norm(xl, np.float32(0.1), gam, bet, np.float32(0.03), 1e-5)
            if settled(yl):
                break
        ins = [("X", xl), ("scale_X", np.array(0.1, np.float32)), ("scale", gam),
               ("B", bet) if with_beta else ("", None), ("scale_Y", np.array(0.03, np.float32))]
        case(name, "QOrderedLayerNormalization", ins, [("Y", sat_round(yl))], order_X=ORDER_ROW,
             order_Y=ORDER_ROW, epsilon=1e-5, axis=-1)

    # GemmFloat8 without float8: Y = alpha * op(A) @ op(B) + beta * C (cuBLASLt computes
    # these with TF32 or float16 products).
    ga, gb, gc = (r.uniform(-1, 1, s).astype(np.float32) for s in ((3, 4), (5, 4), (3, 5)))
    case("gemmfloat8_float_transb", "GemmFloat8", [("A", ga), ("B", gb), ("C", gc)],
         [("Y", 0.5 * d(ga) @ d(gb).T + 2.0 * d(gc))], transB=1, alpha=0.5, beta=2.0,
         dtype=TensorProto.FLOAT)
    ha, hb, hc = (r.uniform(-1, 1, s).astype(np.float16) for s in ((4, 3), (4, 6), (3, 6)))
    case("gemmfloat8_float16_transa", "GemmFloat8", [("A", ha), ("B", hb), ("C", hc)],
         [("Y", (d(ha).T @ d(hb) + d(hc)).astype(np.float16))], transA=1, beta=1.0,
         dtype=TensorProto.FLOAT16)


def main_sparse():
    """SparseAttention (ONNX Runtime's CPU kernel insists that past and present share one
    buffer, which a model's own inputs never do): grouped-query causal attention into a cache of
    16 positions, each head reading only the key blocks its layout (head % layouts) lists for
    its query's block; a row listing as many blocks as a causal row has is dense."""
    g = np.random.default_rng(37)
    f = lambda *shape: g.uniform(-1, 1, shape).astype(np.float32)
    B, N, KV, H, L, blk = 2, 4, 2, 8, 16, 4
    rows = np.array([[0, 1, 3, 5, 7], [0, 1, 3, 6, 10]], np.int32)
    cols = np.zeros((2, 10), np.int32)
    cols[0, :7] = [0, 0, 1, 0, 2, 0, 3]  # each block and the first one
    cols[1] = [0, 0, 1, 0, 1, 2, 0, 1, 2, 3]  # dense

    def rotate(x, cos, sin):  # x [..., H], half-split rotary
        half = cos.shape[-1]
        a, b = d(x[..., :half]), d(x[..., half:2 * half])
        out = d(x).copy()
        out[..., :half] = a * cos - b * sin
        out[..., half:2 * half] = a * sin + b * cos
        return out

    def sparse(q, k, v, pk, pv, lengths, scale, cos=None, sin=None):
        S = q.shape[1]
        q = d(q).reshape(B, S, N, H)
        k, v = d(k).reshape(B, S, KV, H), d(v).reshape(B, S, KV, H)
        out = np.zeros((B, S, N, H))
        present_k, present_v = d(pk).copy(), d(pv).copy()
        for b in range(B):
            past = lengths[b] - S
            for i in range(S):
                pos = past + i
                kk = k[b, i] if cos is None else rotate(k[b, i], d(cos[pos]), d(sin[pos]))
                present_k[b, :, pos], present_v[b, :, pos] = kk, v[b, i]
            for n in range(N):
                layout, h = n % rows.shape[0], n // (N // KV)
                for i in range(S):
                    pos = past + i
                    qi = q[b, i, n] if cos is None else rotate(q[b, i, n], d(cos[pos]), d(sin[pos]))
                    s_ = present_k[b, h, :pos + 1] @ qi * scale
                    row = pos // blk
                    lo, hi = rows[layout, row], rows[layout, row + 1]
                    if hi - lo != row + 1:
                        keep = np.zeros(pos + 1, bool)
                        for c in cols[layout, lo:hi]:
                            keep[c * blk:(c + 1) * blk] = True
                        s_ = np.where(keep[:pos + 1], s_, -np.inf)
                    w = np.exp(s_ - s_.max())
                    out[b, i, n] = (w / w.sum()) @ present_v[b, h, :pos + 1]
        return out.reshape(B, S, N * H), present_k, present_v

    S = 12
    q, k, v = f(B, S, N * H), f(B, S, KV * H), f(B, S, KV * H)
    zeros = np.zeros((B, KV, L, H), np.float32)
    y, pk, pv = sparse(q, k, v, zeros, zeros, [S, S], 1 / math.sqrt(H))
    case("sparseattention_prompt", "SparseAttention",
         [("query", q), ("key", k), ("value", v), ("past_key", zeros), ("past_value", zeros),
          ("block_row_indices", rows), ("block_col_indices", cols),
          ("total_sequence_length", np.array([S], np.int32)),
          ("key_total_sequence_lengths", np.array([S, S], np.int32))],
         [("output", y), ("present_key", pk), ("present_value", pv)], num_heads=N,
         kv_num_heads=KV, sparse_block_size=blk)
    q, k, v, pk0, pv0 = f(B, 1, N * H), f(B, 1, KV * H), f(B, 1, KV * H), f(B, KV, L, H), f(B, KV, L, H)
    angles = g.uniform(0, 3, (L, H // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    lengths = [13, 10]  # rows at different positions
    y, pk, pv = sparse(q, k, v, pk0, pv0, lengths, 0.4, cos, sin)
    case("sparseattention_decode_rotary", "SparseAttention",
         [("query", q), ("key", k), ("value", v), ("past_key", pk0), ("past_value", pv0),
          ("block_row_indices", rows), ("block_col_indices", cols),
          ("total_sequence_length", np.array([13], np.int32)),
          ("key_total_sequence_lengths", np.array(lengths, np.int32)),
          ("cos_cache", cos), ("sin_cache", sin)],
         [("output", y), ("present_key", pk), ("present_value", pv)], num_heads=N,
         kv_num_heads=KV, sparse_block_size=blk, do_rotary=1, scale=0.4)


def longformer_reference(proj, gproj, mask, glob, N, Hs, W):
    """LongformerAttention's output [B, S, N * Hs] from the local and global projections
    ([B, S, 3 D]: q, k, v) in float64: each token reads its window and the global tokens, a
    global token reads every token through the global projection."""
    B, S = mask.shape
    D = N * Hs

    def heads(p):  # [B, S, 3D] -> q, k, v [B, S, N, Hs]
        return [p[..., i * D:(i + 1) * D].reshape(B, S, N, Hs) for i in range(3)]
    (q, k, v), (qg, kg, vg) = heads(proj), heads(gproj)
    y = np.zeros((B, S, N, Hs))
    for b in range(B):
        for i in range(S):
            gl = glob[b, i] != 0
            keys = [j for j in range(S) if gl or glob[b, j] or abs(i - j) <= W]
            for n in range(N):
                qq, kk, vv = (qg, kg, vg) if gl else (q, k, v)
                s_ = np.array([qq[b, i, n] @ kk[b, j, n] / math.sqrt(Hs) + d(mask[b, j])
                               for j in keys])
                e = np.exp(s_ - s_.max())
                y[b, i, n] = (e / e.sum()) @ np.stack([vv[b, j, n] for j in keys])
    return y.reshape(B, S, D)


def main_longformer():
    """LongformerAttention: a sliding window of `window` positions each side, global tokens read
    by every token and reading every token through their own projections, a masked token."""
    g = np.random.default_rng(41)
    f = lambda *shape, s=1.0: (g.uniform(-1, 1, shape) * s).astype(np.float32)
    B, S, N, Hs, W = 2, 8, 2, 4, 2
    D = N * Hs
    x, w, bias, gw, gb = f(B, S, D), f(D, 3 * D, s=0.5), f(3 * D), f(D, 3 * D, s=0.5), f(3 * D)
    mask = np.zeros((B, S), np.float32)
    mask[1, 6:] = -10000.0
    glob = np.zeros((B, S), np.int32)
    glob[0, 0] = glob[1, 0] = glob[1, 4] = 1

    y = longformer_reference(d(x) @ d(w) + d(bias), d(x) @ d(gw) + d(gb), mask, glob, N, Hs, W)
    case("longformerattention", "LongformerAttention",
         [("input", x), ("weight", w), ("bias", bias), ("mask", mask), ("global_weight", gw),
          ("global_bias", gb), ("global", glob)],
         [("output", y)], num_heads=N, window=W)


def main_decoder_attention():
    """DecoderAttention: self-attention after a cache, cross-attention to fresh keys with a
    padding mask, and cross-attention to cached keys."""
    g = np.random.default_rng(43)
    f = lambda *shape, s=1.0: (g.uniform(-1, 1, shape) * s).astype(np.float32)
    S, B, N, Hs, P, T = 2, 2, 2, 4, 3, 5
    D = N * Hs
    qw, kvw, bias = f(D, D, s=0.5), f(D, 2 * D, s=0.5), f(3 * D)
    flag = lambda v: np.array(v, np.bool_)

    def attend(query, k, v, mask=None):  # k, v [B, N, T, Hs]
        q = (d(query) @ d(qw) + d(bias[:D])).reshape(S, B, N, Hs) / math.sqrt(Hs)
        out = np.zeros((S, B, N, Hs))
        for s_ in range(S):
            for b in range(B):
                for n in range(N):
                    sc = k[b, n] @ q[s_, b, n]
                    if mask is not None:
                        sc = np.where(mask[b], -10000.0, sc)
                    e = np.exp(sc - sc.max())
                    out[s_, b, n] = (e / e.sum()) @ v[b, n]
        return out.reshape(S, B, D)

    def kv_of(x):  # [L, B, D] -> k, v [B, N, L, Hs]
        p = d(x) @ d(kvw) + d(bias[D:])
        k, v = p[..., :D], p[..., D:]
        return [a.reshape(x.shape[0], B, N, Hs).transpose(1, 2, 0, 3) for a in (k, v)]

    query, key = f(S, B, D), f(T, B, D)
    kc, vc = f(B, N, P, Hs), f(B, N, P, Hs)
    k_new, v_new = kv_of(query)
    k, v = np.concatenate([d(kc), k_new], 2), np.concatenate([d(vc), v_new], 2)
    inputs = lambda mask, kcache, vcache, static, past, state, has_mask: [
        ("query", query), ("key", key), ("q_weight", qw), ("kv_weight", kvw), ("bias", bias),
        ("key_padding_mask", mask) if mask is not None else ("", None),
        ("key_cache", kcache) if kcache is not None else ("", None),
        ("value_cache", vcache) if vcache is not None else ("", None),
        ("static_kv", flag(static)), ("use_past", flag(past)), ("has_layer_state", flag(state)),
        ("has_key_padding_mask", flag(has_mask))]
    case("decoderattention_self_past", "DecoderAttention",
         inputs(None, kc, vc, False, True, True, False),
         [("output", attend(query, k, v)), ("new_key_cache", k), ("new_value_cache", v)],
         num_heads=N)
    mask = np.zeros((B, T), np.bool_)
    mask[0, 3:] = True
    k, v = kv_of(key)
    case("decoderattention_cross_mask", "DecoderAttention",
         inputs(mask, None, None, True, False, True, True),
         [("output", attend(query, k, v, mask)), ("new_key_cache", k), ("new_value_cache", v)],
         num_heads=N)
    case("decoderattention_cross_cached", "DecoderAttention",
         inputs(None, kc, vc, True, True, False, False),
         [("output", attend(query, d(kc), d(vc)))], num_heads=N)


def main_qordered_attention():
    """QOrderedAttention: int8 Q, K, V, scores, probabilities and context, each stage rounded
    half to even and saturated in the next stage's scale; float32 scale products as the kernel
    forms them, and a seed whose every stage keeps clear of rounding ties."""
    r = np.random.default_rng(37)
    B, S, Hin, N, hs = 2, 5, 32, 2, 16
    H = N * hs
    f = np.float32
    s_in, s_q, s_k, s_v, s_qkt, s_sm, s_out = (f(v) for v in (0.05, 0.08, 0.07, 0.061, 1.0,
                                                              1 / 120, 0.043))
    mask = np.ones((B, S), np.int32)
    mask[1, 3:] = 0
    for _ in range(1000):
        x = r.integers(-60, 60, (B, S, Hin)).astype(np.int8)
        w = [r.integers(-20, 20, (Hin, H)).astype(np.int8) for _ in range(3)]
        sw = [r.uniform(0.01, 0.03, H).astype(f), np.array(f(0.02)), np.array(f(0.025))]
        bias = [r.uniform(-1, 1, H).astype(f) for _ in range(3)]
        qkv, ok = [], True
        for p, gemm in enumerate((s_q, s_k, s_v)):
            alpha = d(s_in * sw[p] / gemm)
            v = alpha * np.matmul(x.astype(np.int64), w[p].astype(np.int64)) + d(bias[p] / gemm)
            ok &= settled(v)
            qkv.append(sat_round(v).reshape(B, S, N, hs).transpose(0, 2, 1, 3).astype(np.int64))
        q, k, v = qkv
        scores = d(s_q * s_k / s_qkt) * np.matmul(q, k.transpose(0, 1, 3, 2))
        ok &= settled(scores)
        sc = sat_round(scores).astype(np.int64)
        base = math.exp(float(s_qkt) / math.sqrt(hs))
        table = np.array([f(base ** (i - 255)) for i in range(256)], np.float64)
        e = table[255 - sc.max(-1, keepdims=True) + sc] * mask[:, None, None, :]
        pv = e / (e.sum(-1, keepdims=True) * d(s_sm))
        ok &= settled(pv)
        probs = sat_round(pv).astype(np.int64)
        ctxv = d(s_sm * s_v / s_out) * np.matmul(probs, v)
        ok &= settled(ctxv)
        if ok:
            break
    else:
        raise RuntimeError("no seed keeps QOrderedAttention clear of rounding ties")
    out = sat_round(ctxv).transpose(0, 2, 1, 3).reshape(B, S, H)
    col = lambda m: m.T.copy().reshape(m.shape)  # bytes column by column, shape kept
    inputs = [("input", x), ("scale_input", np.array(s_in)), ("scale_Q_gemm", np.array(s_q)),
              ("scale_K_gemm", np.array(s_k)), ("scale_V_gemm", np.array(s_v)),
              ("Q_weight", col(w[0])), ("K_weight", col(w[1])), ("V_weight", col(w[2])),
              ("scale_Q_weight", sw[0]), ("scale_K_weight", sw[1]),
              ("scale_V_weight", sw[2]), ("Q_bias", bias[0]), ("K_bias", bias[1]),
              ("V_bias", bias[2]), ("scale_QKT_gemm", np.array(s_qkt)),
              ("scale_QKT_softmax", np.array(s_sm)), ("scale_values_gemm", np.array(s_out)),
              ("mask_index", mask)]
    case("qorderedattention_mask", "QOrderedAttention", inputs, [("output", out)],
         num_heads=N, order_input=ORDER_ROW, order_weight=ORDER_COL, order_output=ORDER_ROW,
         qkv_hidden_sizes=[H, H, H])


def main_qordered_longformer():
    """QOrderedLongformerAttention: int8 projections saturated in their gemm scales (biases in
    those units), LongformerAttention on their dequantized values, the output quantized; a seed
    whose every rounding stage keeps clear of ties."""
    g = np.random.default_rng(47)
    B, S, N, Hs, W = 2, 8, 2, 4, 2
    D = N * Hs
    f = np.float32
    s_in, s_w, s_qkv, s_gw, s_g, s_out = (f(v) for v in (0.05, 0.01, 0.031, 0.012, 0.029, 0.043))
    mask = np.zeros((B, S), np.float16)
    mask[1, 6:] = -10000.0
    glob = np.zeros((B, S), np.int32)
    glob[0, 0] = glob[1, 0] = glob[1, 4] = 1
    for _ in range(1000):
        x = g.integers(-100, 100, (B, S, D)).astype(np.int8)
        w, gw = (g.integers(-100, 100, (D, 3 * D)).astype(np.int8) for _ in range(2))
        bias, gbias = (g.uniform(-20, 20, 3 * D).astype(f) for _ in range(2))
        ok = True
        proj = []
        for wm, bm, sw, sg in ((w, bias, s_w, s_qkv), (gw, gbias, s_gw, s_g)):
            v = d(s_in * sw / sg) * (x.astype(np.int64) @ wm.astype(np.int64)) + d(bm)
            ok &= settled(v)
            proj.append(d(sg) * d(sat_round(v)))
        out = longformer_reference(*proj, mask, glob, N, Hs, W) * d(f(1) / s_out)
        ok &= settled(out)
        if ok:
            break
    else:
        raise RuntimeError("no seed keeps QOrderedLongformerAttention clear of rounding ties")
    col = lambda m: m.T.copy().reshape(m.shape)  # bytes column by column, shape kept
    case("qorderedlongformerattention", "QOrderedLongformerAttention",
         [("input", x), ("scale_input", np.array(s_in)), ("weight", col(w)),
          ("scale_weight", np.array(s_w)), ("bias", bias), ("scale_bias", np.array(f(1))),
          ("scale_qkv_gemm", np.array(s_qkv)), ("mask", mask), ("global_weight", col(gw)),
          ("scale_global_weight", np.array(s_gw)), ("global_bias", gbias),
          ("scale_global_gemm", np.array(s_g)), ("global", glob),
          ("scale_output", np.array(s_out))],
         [("output", sat_round(out))], num_heads=N, window=W, order_input=ORDER_ROW,
         order_weight=ORDER_COL, order_global_weight=ORDER_COL, order_output=ORDER_ROW)


def main_sparse_to_dense():
    """SparseToDenseMatMul: a sparse A (COO, indices [nnz, 2]; a repeated entry adds) times a
    dense B, alpha, transposes. A is a graph input of sparse tensor type, its .pb a
    SparseTensorProto, as the ONNX backend tests store one."""
    g = np.random.default_rng(59)

    def sparse_case(name, M, K, N, nnz, dtype, alpha=1.0, trans_a=0, trans_b=0):
        rows, cols = (K, M) if trans_a else (M, K)
        idx = np.stack([g.integers(0, rows, nnz), g.integers(0, cols, nnz)], 1).astype(np.int64)
        idx[1] = idx[0]  # a repeated entry: both add
        vals = (g.uniform(-2, 2, nnz) if dtype == np.float32 else
                g.integers(-9, 9, nnz)).astype(dtype)
        dense = np.zeros((rows, cols), np.float64)
        for (r, c), v in zip(idx, vals):
            dense[r, c] += v
        b = (g.uniform(-2, 2, (N, K) if trans_b else (K, N)) if dtype == np.float32 else
             g.integers(-9, 9, (N, K) if trans_b else (K, N))).astype(dtype)
        a_op = dense.T if trans_a else dense
        b_op = d(b).T if trans_b else d(b)
        y = alpha * (a_op @ b_op)
        sp = helper.make_sparse_tensor(numpy_helper.from_array(vals, "A"),
                                       numpy_helper.from_array(idx, "A_indices"), [rows, cols])
        node = helper.make_node("SparseToDenseMatMul", ["A", "B"], ["Y"], domain="com.microsoft",
                                alpha=alpha, transA=trans_a, transB=trans_b)
        graph = helper.make_graph(
            [node], name,
            [helper.make_sparse_tensor_value_info("A", ELEM[dtype], [rows, cols]),
             helper.make_tensor_value_info("B", ELEM[dtype], b.shape)],
            [helper.make_tensor_value_info("Y", ELEM[dtype], y.shape)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        out = os.path.join(OUT, name)
        os.makedirs(os.path.join(out, "test_data_set_0"))
        onnx.save(model, os.path.join(out, "model.onnx"))
        ds = os.path.join(out, "test_data_set_0")
        open(os.path.join(ds, "input_0.pb"), "wb").write(sp.SerializeToString())
        open(os.path.join(ds, "input_1.pb"), "wb").write(
            numpy_helper.from_array(b, "B").SerializeToString())
        yt = y.astype(dtype) if dtype != np.float32 else y.astype(np.float32)
        open(os.path.join(ds, "output_0.pb"), "wb").write(
            numpy_helper.from_array(yt, "Y").SerializeToString())

    sparse_case("sparsetodensematmul_alpha", 4, 6, 5, 7, np.float32, alpha=0.75)
    sparse_case("sparsetodensematmul_transposed", 4, 6, 5, 9, np.float32, trans_a=1, trans_b=1)
    sparse_case("sparsetodensematmul_int64", 3, 5, 4, 6, np.int64)


# Block floating point as deepwire lays it out (engine/kernels/bfp.cpp): blocks of 16 values
# along block_dim, stored in the order of their first value in the original memory layout; each
# block a little-endian bit stream of an 8-bit exponent E (bias 127), then per value an (M+1)-bit
# code, magnitude low and sign high, worth m * 2^(E - 127 - (M - 1)). Written here bit by bit in
# float64, apart from the kernel's code.
BFP_MANTISSA = {0: 8, 1: 4}


def bfp_blocks(shape, strides, block_dim):
    """Each block's row-major flat indices (None past a line's end), in storage order."""
    rank = len(shape)
    axis = block_dim % rank
    order = sorted(range(rank), key=lambda a: -strides[a])  # stable: outermost first
    extent = [-(-shape[a] // 16) if a == axis else shape[a] for a in range(rank)]
    blocks = []
    for idx in itertools.product(*[range(extent[a]) for a in order]):
        pos = dict(zip(order, idx))
        block = []
        for k in range(16):
            c = pos[axis] * 16 + k
            coords = tuple(c if a == axis else pos[a] for a in range(rank))
            block.append(int(np.ravel_multi_index(coords, shape)) if c < shape[axis] else None)
        blocks.append(block)
    return blocks


def bfp_encode_block(values, M):
    top = 2 ** M - 1
    largest = max(abs(v) for v in values)
    e = 0 if largest == 0 else min(max(math.frexp(largest)[1] - 1 + 127, 0), 254)

    def magnitude(v, e):
        return round(abs(v) * 2.0 ** -(e - 127 - (M - 1)))  # Python rounds half to even

    if e < 254 and magnitude(largest, e) > top:
        e += 1
    bits = [e >> i & 1 for i in range(8)]
    for v in values:
        m = min(magnitude(v, e), top)
        code = m | (1 << M if m and math.copysign(1.0, v) < 0 else 0)
        bits += [code >> i & 1 for i in range(M + 1)]
    return [sum(bits[8 * j + i] << i for i in range(8)) for j in range(len(bits) // 8)]


def bfp_decode_block(data, M):
    bits = [b >> i & 1 for b in data for i in range(8)]
    e = sum(bits[i] << i for i in range(8))
    values = []
    for k in range(16):
        code = sum(bits[8 + k * (M + 1) + i] << i for i in range(M + 1))
        v = (code & (2 ** M - 1)) * 2.0 ** (e - 127 - (M - 1))
        values.append(-v if code >> M else v)
    return values


def bfp_quantize(x, bfp_type, block_dim):
    M = BFP_MANTISSA[bfp_type]
    flat = [float(v) for v in x.reshape(-1)]
    strides = [int(np.prod(x.shape[a + 1:])) for a in range(x.ndim)]
    out = []
    for block in bfp_blocks(x.shape, strides, block_dim):
        out += bfp_encode_block([0.0 if i is None else flat[i] for i in block], M)
    return np.array(out, np.uint8), np.array(x.shape, np.int64), np.array(strides, np.int64)


def bfp_dequantize(data, shape, strides, bfp_type, block_dim):
    M = BFP_MANTISSA[bfp_type]
    size = (8 + 16 * (M + 1)) // 8
    y = np.zeros(int(np.prod(shape)), np.float64)
    for b, block in enumerate(bfp_blocks(shape, strides, block_dim)):
        values = bfp_decode_block(data[b * size:(b + 1) * size], M)
        for i, v in zip(block, values):
            if i is not None:
                y[i] = v
    return y.reshape(shape)


def bfp_random_bytes(rng, blocks, bfp_type, exponents):
    """Random codes under exponents drawn from `exponents` (kept in float16's or float32's
    normal range)."""
    M = BFP_MANTISSA[bfp_type]
    size = (8 + 16 * (M + 1)) // 8
    data = rng.integers(0, 256, blocks * size).astype(np.uint8)
    data[::size] = rng.integers(exponents[0], exponents[1], blocks)
    return data


def main_bfp():
    rng = np.random.default_rng(31)
    # Rows of very different scales, a block of zeros, a negative zero and a magnitude that
    # rounds past M bits (1.97 with M = 4: 15.76 -> 16, so E goes up by one).
    x = (rng.standard_normal((3, 40)) * np.array([[1e-3], [1.0], [300.0]])).astype(np.float32)
    x[1, 16:32] = 0
    x[1, 32] = -0.0
    y, shape, strides = bfp_quantize(x, 0, -1)
    case("quantizebfp_m8_last_axis", "QuantizeBFP", [("x", x)],
         [("y", y), ("shape", shape), ("strides", strides)], bfp_type=0)
    x4 = rng.uniform(-1, 1, (37, 3)).astype(np.float32)
    x4[5, 1] = 1.97
    x4[20:37, 2] *= 1e4
    y, shape, strides = bfp_quantize(x4, 1, 0)
    case("quantizebfp_m4_axis0_partial_blocks", "QuantizeBFP", [("x", x4)],
         [("y", y), ("shape", shape), ("strides", strides)], bfp_type=1, block_dim=0)

    def dequantize_case(name, bfp_type, shape, strides, block_dim, exponents, dtype, out):
        blocks = len(bfp_blocks(shape, strides, block_dim))
        data = bfp_random_bytes(rng, blocks, bfp_type, exponents)
        y = bfp_dequantize(data, shape, strides, bfp_type, block_dim)
        case(name, "DequantizeBFP",
             [("x", data), ("shape", np.array(shape, np.int64)),
              ("strides", np.array(strides, np.int64))],
             [("y", y.astype(out))], bfp_type=bfp_type, block_dim=block_dim, dtype=dtype)

    dequantize_case("dequantizebfp_m8_row_major", 0, (2, 5, 20), (100, 20, 1), -1, (110, 140),
                    1, np.float64)
    # Memory order axis 2, 0, 1 (strides in elements), blocks along axis 1 (6 long, padded).
    dequantize_case("dequantizebfp_m4_permuted_strides_float16", 1, (4, 6, 18), (6, 1, 24), 1,
                    (120, 135), 10, np.float16)
    dequantize_case("dequantizebfp_m8_axis0_column_major", 0, (33, 2, 3), (1, 33, 66), 0,
                    (100, 150), 1, np.float64)


main()
main_ordered()
main_sparse()
main_longformer()
main_decoder_attention()
main_qordered_attention()
main_qordered_longformer()
main_sparse_to_dense()
main_bfp()
print(f"{OUT}: {len(os.listdir(OUT))} cases after the ordered and float8 ones")
