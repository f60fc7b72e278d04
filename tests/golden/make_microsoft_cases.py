#!/usr/bin/python3
"""Reference cases computed by ONNX Runtime 1.30 for operators the ONNX backend-test data of
libonnx 1.12 does not cover: the com.microsoft operators (nodes/microsoft_domain.cpp), which ONNX
Runtime's contrib domain defines, in tests/golden/ort-contrib, and the ai.onnx operators added
after opset 17, in tests/golden/ort-onnx. Each case is a one-node model with its inputs and ONNX
Runtime's outputs in the ONNX backend-test layout (<suite>/<case>/model.onnx,
test_data_set_0/input_N.pb and output_N.pb), which tests/engine/microsoft_ops_test.cpp runs
through deepwire, as does `deepwire conformance --data tests/golden --suite ort-contrib` (or
ort-onnx).

Usage: /usr/bin/python3 tests/golden/make_microsoft_cases.py [onnxruntime-node folder]
(default build/bench/zoo/ort/node_modules/onnxruntime-node, which bench/zoo/run installs).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "build", "bench", "zoo", "ort", "node_modules", "onnxruntime-node")
OUT = os.path.join(HERE, "ort-contrib")
OUT_ONNX = os.path.join(HERE, "ort-onnx")
rng = np.random.default_rng(11)
ELEM = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
        np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL,
        np.float64: TensorProto.DOUBLE, np.int16: TensorProto.INT16,
        np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32,
        np.uint64: TensorProto.UINT64, np.object_: TensorProto.STRING}


def ort_run(model_path, feeds, threads=None):
    d = tempfile.mkdtemp()
    try:
        enc = {k: {"type": "string" if v.dtype == object else str(v.dtype), "dims": list(v.shape),
                   "data": v.ravel().tolist()} for k, v in feeds.items()}
        json.dump(enc, open(os.path.join(d, "in.json"), "w"))
        subprocess.run(["node", os.path.join(HERE, "ort_json.js"), ORT, model_path,
                        os.path.join(d, "in.json"), os.path.join(d, "out.json")] +
                       ([str(threads)] if threads else []), check=True)
        out = json.load(open(os.path.join(d, "out.json")))
        return {k: np.array(v["data"], dtype=object if v["type"] == "string" else v["type"])
                .reshape(v["dims"]) for k, v in out.items()}
    finally:
        shutil.rmtree(d)


def case(name, op, inputs, outputs, out_type=None, onnx_opset=None, threads=None, **attrs):
    """inputs: list of (name, array) with name "" for an omitted optional input; outputs: names
    ("" leaves an optional output out); out_type: the outputs' numpy type where it is not the
    first input's. With `onnx_opset` the op is ai.onnx's at that version (suite ort-onnx), else
    com.microsoft's (suite ort-contrib)."""
    given = [(n, a) for n, a in inputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], outputs,
                            domain="" if onnx_opset else "com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, ELEM[a.dtype.type], a.shape) for n, a in given],
        [helper.make_tensor_value_info(
            o, ELEM[(out_type[k] if isinstance(out_type, list) else out_type) or
                    given[0][1].dtype.type], None)
         for k, o in enumerate(outputs) if o])
    if onnx_opset:
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_opset)])
        model.ir_version = 10 if onnx_opset > 17 else 8  # 8: what libonnx 1.12 checks
    else:
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
    d = os.path.join(OUT_ONNX if onnx_opset else OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    res = ort_run(path, dict(given), threads)
    # The outputs' shapes as ONNX Runtime computed them (libonnx's checker wants one declared).
    for o in model.graph.output:
        o.CopyFrom(helper.make_tensor_value_info(o.name, ELEM[res[o.name].dtype.type],
                                                 list(res[o.name].shape)))
    onnx.save(model, path)
    for i, (n, a) in enumerate(given):
        t = numpy_helper.from_array(a, n)
        open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb").write(t.SerializeToString())
    for i, o in enumerate(o for o in outputs if o):
        t = numpy_helper.from_array(res[o], o)
        open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb").write(t.SerializeToString())


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    x, w = f32(2, 4, 7, 6), f32(6, 4, 3, 3, lo=-0.4, hi=0.4)
    case("fusedconv_relu", "FusedConv", [("X", x), ("W", w), ("B", f32(6))], ["Y"],
         activation="Relu", pads=[1, 1, 1, 1])
    case("fusedconv_z_leakyrelu_group", "FusedConv",
         [("X", x), ("W", f32(6, 2, 3, 3)), ("B", f32(6)), ("Z", f32(2, 6, 3, 2))], ["Y"],
         activation="LeakyRelu", activation_params=[0.1], strides=[2, 2], group=2)
    case("fusedconv_clip_nobias", "FusedConv", [("X", x), ("W", w)], ["Y"], activation="Clip",
         activation_params=[0.0, 0.5], auto_pad="SAME_UPPER")
    case("fusedconv_hardsigmoid", "FusedConv", [("X", x), ("W", w), ("B", f32(6))], ["Y"],
         activation="HardSigmoid", activation_params=[0.3, 0.4], dilations=[2, 1])
    case("fusedconv_sigmoid_1d", "FusedConv",
         [("X", f32(2, 3, 9)), ("W", f32(5, 3, 2)), ("B", f32(5))], ["Y"], activation="Sigmoid")
    case("fusedconv_tanh", "FusedConv", [("X", x), ("W", w)], ["Y"], activation="Tanh",
         kernel_shape=[3, 3], pads=[0, 1, 2, 1])
    a, b = f32(3, 5), f32(4, 5)
    case("fusedgemm_relu", "FusedGemm", [("A", a), ("B", b), ("C", f32(4))], ["Y"],
         activation="Relu", transB=1, alpha=0.5, beta=2.0)
    case("fusedgemm_leakyrelu", "FusedGemm", [("A", a), ("B", b), ("C", f32(3, 4))], ["Y"],
         activation="LeakyRelu", activation_alpha=0.2, transB=1)
    case("fusedgemm_hardsigmoid", "FusedGemm", [("A", a), ("B", f32(5, 4))], ["Y"],
         activation="HardSigmoid", activation_alpha=0.25, activation_beta=0.6)
    case("fusedgemm_tanh_transa", "FusedGemm", [("A", f32(5, 3)), ("B", f32(5, 4))], ["Y"],
         activation="Tanh", transA=1)
    for act, kw in [("Elu", dict(activation_alpha=0.7)), ("Softplus", {}),
                    ("ThresholdedRelu", dict(activation_alpha=0.1)), ("Sigmoid", {}),
                    ("Selu", dict(activation_alpha=1.2, activation_gamma=0.8)),
                    ("ScaledTanh", dict(activation_alpha=0.5, activation_beta=1.5)),
                    ("ParametricSoftplus", dict(activation_alpha=0.5, activation_beta=2.0))]:
        case("fusedgemm_" + act.lower(), "FusedGemm", [("A", a), ("B", b)], ["Y"],
             activation=act, transB=1, **kw)
    case("fusedmatmul_plain", "FusedMatMul", [("A", f32(3, 5)), ("B", f32(5, 4))], ["Y"])
    case("fusedmatmul_trans_alpha", "FusedMatMul", [("A", f32(2, 5, 3)), ("B", f32(4, 5))],
         ["Y"], transA=1, transB=1, alpha=0.25)
    case("fusedmatmul_transbatcha", "FusedMatMul",
         [("A", f32(4, 2, 3, 5)), ("B", f32(2, 3, 5, 6))], ["Y"], transBatchA=1)
    case("fusedmatmul_transbatchb_transb", "FusedMatMul",
         [("A", f32(2, 3, 4)), ("B", f32(5, 2, 4))], ["Y"], transBatchB=1, transB=1)
    case("transposematmul", "TransposeMatMul", [("A", f32(2, 5, 3)), ("B", f32(2, 5, 4))],
         ["Y"], transA=1, alpha=2.0)
    inp, skip = f32(2, 3, 8), f32(2, 3, 8)
    case("skiplayernorm_all", "SkipLayerNormalization",
         [("input", inp), ("skip", skip), ("gamma", f32(8)), ("beta", f32(8)),
          ("bias", f32(8))], ["output", "mean", "inv_std_var", "input_skip_bias_sum"],
         epsilon=1e-5)
    case("skiplayernorm_plain", "SkipLayerNormalization",
         [("input", inp), ("skip", skip), ("gamma", f32(8))], ["output"])
    case("skipsimplifiedlayernorm_bias", "SkipSimplifiedLayerNormalization",
         [("input", inp), ("skip", skip), ("gamma", f32(8)), ("bias", f32(8))],
         ["output", "", "inv_std_var", "input_skip_bias_sum"], epsilon=1e-6)
    case("skipsimplifiedlayernorm_plain", "SkipSimplifiedLayerNormalization",
         [("input", inp), ("skip", skip), ("gamma", f32(8))], ["output"])
    g = f32(2, 3, 8, lo=-4, hi=4)
    case("quickgelu", "QuickGelu", [("X", g)], ["Y"])
    case("quickgelu_alpha1", "QuickGelu", [("X", g)], ["Y"], alpha=1.0)
    case("gelu", "Gelu", [("X", g)], ["Y"])
    case("fastgelu", "FastGelu", [("X", g)], ["Y"])
    case("fastgelu_bias", "FastGelu", [("X", g), ("bias", f32(8))], ["Y"])
    case("biasgelu", "BiasGelu", [("A", g), ("B", f32(8))], ["C"])
    case("trilu_upper_k1", "Trilu", [("X", f32(2, 4, 5)), ("k", np.array(1, np.int64))], ["Y"])
    case("trilu_lower", "Trilu", [("X", f32(4, 5))], ["Y"], upper=0)
    case("range_float", "Range",
         [("start", np.array(0.5, np.float32)), ("limit", np.array(3.0, np.float32)),
          ("delta", np.array(0.75, np.float32))], ["Y"])
    case("range_int_nodelta", "Range",
         [("start", np.array(-2, np.int64)), ("limit", np.array(5, np.int64))], ["Y"])
    p = f32(2, 3, 4)
    case("pad_constant", "Pad",
         [("data", p), ("pads", np.array([[0, 1, 2, 1, 0, 1]], np.int64)),
          ("value", np.array([1.5], np.float32))], ["output"])
    case("pad_reflect", "Pad", [("data", p), ("pads", np.array([0, 1, 1, 0, 1, 2], np.int64))],
         ["output"], mode="reflect")
    case("pad_edge", "Pad", [("data", p), ("pads", np.array([1, 0, 2, 0, 0, 1], np.int64))],
         ["output"], mode="edge")
    case("expanddims_last", "ExpandDims", [("X", p), ("axis", np.array(-1, np.int32))], ["Y"])
    case("expanddims_1", "ExpandDims", [("X", p), ("axis", np.array(1, np.int32))], ["Y"])
    case("cdist_sqeuclidean", "CDist", [("A", f32(4, 3)), ("B", f32(5, 3))], ["C"])
    case("cdist_euclidean", "CDist", [("A", f32(4, 3)), ("B", f32(5, 3))], ["C"],
         metric="euclidean")
    data = f32(3, 4, 5)
    case("gathernd", "GatherND", [("data", data), ("indices", np.array([[0, 1], [-1, 2], [1, -4]],
                                                                        np.int64))], ["output"])
    case("gathernd_full", "GatherND",
         [("data", data), ("indices", np.array([[[2, 3, 4]], [[0, 0, -1]]], np.int64))],
         ["output"])
    img, grid = f32(1, 2, 4, 5), f32(1, 3, 6, 2, lo=-1.2, hi=1.2)
    case("gridsample_bilinear", "GridSample", [("X", img), ("Grid", grid)], ["Y"])
    case("gridsample_nearest_border_aligned", "GridSample", [("X", img), ("Grid", grid)], ["Y"],
         mode="nearest", padding_mode="border", align_corners=1)
    case("gridsample_bicubic_reflection", "GridSample", [("X", img), ("Grid", grid)], ["Y"],
         mode="bicubic", padding_mode="reflection")
    q = f32(2, 3, 4, lo=-3, hi=3)
    case("quantizelinear_uint8", "QuantizeLinear",
         [("x", q), ("y_scale", np.array(0.02, np.float32)),
          ("y_zero_point", np.array(128, np.uint8))], ["y"], out_type=np.uint8)
    case("quantizelinear_int8_axis", "QuantizeLinear",
         [("x", q), ("y_scale", np.array([0.02, 0.03, 0.05], np.float32)),
          ("y_zero_point", np.array([0, -3, 5], np.int8))], ["y"], axis=1,
         out_type=np.int8)
    qi = rng.integers(-128, 127, (2, 3, 4)).astype(np.int8)
    case("dequantizelinear_int8_axis", "DequantizeLinear",
         [("x", qi), ("x_scale", np.array([0.1, 0.2, 0.3, 0.4], np.float32)),
          ("x_zero_point", np.array([1, -2, 0, 3], np.int8))], ["y"], axis=2,
         out_type=np.float32)
    case("dequantizelinear_uint8", "DequantizeLinear",
         [("x", rng.integers(0, 255, (5,)).astype(np.uint8)),
          ("x_scale", np.array(0.5, np.float32))], ["y"], out_type=np.float32)
    case("unique", "Unique", [("x", np.array([3.0, 1.0, 3.0, 2.0, 1.0, 5.0], np.float32))],
         ["y", "idx", "counts"], out_type=[np.float32, np.int64, np.int64])
    for dt in (np.uint8, np.int8):
        lo, hi = (0, 255) if dt == np.uint8 else (-128, 127)
        t = dt.__name__

        def qt(*shape):
            return rng.integers(lo, hi + 1, shape).astype(dt)

        def sc(v):
            return np.array(v, np.float32)

        def zp(v):
            return np.array(v if dt == np.int8 else v + 128, dt)

        qa, qb = qt(2, 3, 8), qt(8)
        for op in ("QLinearAdd", "QLinearMul"):
            case(f"{op.lower()}_{t}", op,
                 [("A", qa), ("A_scale", sc(0.0173)), ("A_zero_point", zp(3)), ("B", qb),
                  ("B_scale", sc(0.0291)), ("B_zero_point", zp(-5)), ("C_scale", sc(0.0377)),
                  ("C_zero_point", zp(1))], ["C"])
        case(f"qlinearsigmoid_{t}", "QLinearSigmoid",
             [("X", qa), ("X_scale", sc(0.05)), ("X_zero_point", zp(2)),
              ("Y_scale", sc(1 / 256)), ("Y_zero_point", zp(-128))], ["Y"])
        case(f"qlinearleakyrelu_{t}", "QLinearLeakyRelu",
             [("X", qa), ("X_scale", sc(0.05)), ("X_zero_point", zp(2)),
              ("Y_scale", sc(0.03)), ("Y_zero_point", zp(-7))], ["Y"], alpha=0.2)
        img = qt(2, 3, 5, 4)
        case(f"qlinearglobalaveragepool_{t}", "QLinearGlobalAveragePool",
             [("X", img), ("x_scale", sc(0.02)), ("x_zero_point", zp(4)),
              ("y_scale", sc(0.01)), ("y_zero_point", zp(-3))], ["Y"])
        case(f"qlinearglobalaveragepool_nhwc_{t}", "QLinearGlobalAveragePool",
             [("X", img), ("x_scale", sc(0.02)), ("x_zero_point", zp(4)),
              ("y_scale", sc(0.01)), ("y_zero_point", zp(-3))], ["Y"], channels_last=1)
        case(f"qlinearconcat_{t}", "QLinearConcat",
             [("Y_scale", sc(0.04)), ("Y_zero_point", zp(1)), ("X0", qt(2, 3)),
              ("X0_scale", sc(0.03)), ("X0_zero_point", zp(-2)), ("X1", qt(2, 2)),
              ("X1_scale", sc(0.05)), ("X1_zero_point", zp(6))], ["Y"], axis=1, out_type=dt)
        sm = qt(3, 4, 10)
        case(f"qlinearsoftmax_{t}", "QLinearSoftmax",
             [("X", sm), ("X_scale", sc(0.05)), ("x_zero_point", zp(3)),
              ("y_scale", sc(1 / 256)), ("y_zero_point", np.array(lo, dt))], ["Y"], opset=13)
        case(f"qlinearsoftmax_opset12_axis1_{t}", "QLinearSoftmax",
             [("X", sm), ("X_scale", sc(0.08)), ("x_zero_point", zp(-4)),
              ("y_scale", sc(1 / 256)), ("y_zero_point", np.array(lo, dt))], ["Y"], opset=12,
             axis=1)
        case(f"qlinearwhere_{t}", "QLinearWhere",
             [("condition", rng.integers(0, 2, (2, 3, 8)).astype(bool)), ("X", qa),
              ("x_scale", sc(0.02)), ("x_zero_point", zp(3)), ("Y", qb), ("y_scale", sc(0.04)),
              ("y_zero_point", zp(-1)), ("z_scale", sc(0.03)), ("z_zero_point", zp(2))], ["Z"],
             out_type=dt)
    qry, key, val = f32(2, 3, 8), f32(2, 5, 8), f32(2, 5, 4)
    case("mha_plain", "MultiHeadAttention", [("query", qry), ("key", key), ("value", val)],
         ["output"], num_heads=2)
    case("mha_bias_mask_scale", "MultiHeadAttention",
         [("query", qry), ("key", key), ("value", val), ("bias", f32(20)),
          ("key_padding_mask", np.array([[1, 1, 1, 0, 1], [1, 0, 1, 1, 1]], np.int32))],
         ["output"], num_heads=4, scale=0.3)
    case("mha_attention_bias_causal", "MultiHeadAttention",
         [("query", qry), ("key", f32(2, 3, 8)), ("value", f32(2, 3, 4)), ("", None), ("", None),
          ("attention_bias", f32(1, 2, 3, 3))], ["output"], num_heads=2, unidirectional=1)
    case("mha_past", "MultiHeadAttention",
         [("query", qry), ("key", key), ("value", f32(2, 5, 8)), ("", None), ("", None),
          ("", None), ("past_key", f32(2, 2, 4, 4)), ("past_value", f32(2, 2, 4, 4))],
         ["output", "present_key", "present_value"], num_heads=2)
    x = f32(2, 4, 6)
    wq = f32(6, 24, lo=-0.5, hi=0.5)
    case("attention_plain", "Attention", [("input", x), ("weights", wq), ("bias", f32(24))],
         ["output"], num_heads=2)
    case("attention_lengths", "Attention",
         [("input", x), ("weights", wq), ("bias", f32(24)),
          ("mask_index", np.array([3, 2], np.int32))], ["output"], num_heads=4)
    case("attention_raw_mask_causal", "Attention",
         [("input", x), ("weights", wq), ("bias", f32(24)),
          ("mask_index", np.array([[1, 1, 0, 1], [1, 1, 1, 0]], np.int32))], ["output"],
         num_heads=2, unidirectional=1)
    case("attention_qkv_sizes_scale", "Attention",
         [("input", x), ("weights", f32(6, 20, lo=-0.5, hi=0.5)), ("bias", f32(20))], ["output"],
         num_heads=2, qkv_hidden_sizes=[8, 8, 4], scale=0.25)
    case("attention_past", "Attention",
         [("input", x), ("weights", wq), ("bias", f32(24)),
          ("mask_index", np.array([5, 7], np.int32)), ("past", f32(2, 2, 2, 3, 4))],
         ["output", "present"], num_heads=2)
    cos, sin = f32(8, 2), f32(8, 2)
    case("rotary_3d", "RotaryEmbedding",
         [("input", f32(2, 3, 8)), ("position_ids", np.array([[0, 1, 2], [3, 4, 5]], np.int64)),
          ("cos_cache", cos), ("sin_cache", sin)], ["output"], num_heads=2)
    case("rotary_3d_start_interleaved", "RotaryEmbedding",
         [("input", f32(2, 3, 8)), ("position_ids", np.array([2], np.int64)),
          ("cos_cache", cos), ("sin_cache", sin)], ["output"], num_heads=2, interleaved=1)
    case("rotary_4d_partial", "RotaryEmbedding",
         [("input", f32(2, 2, 3, 8)), ("position_ids", np.array([[1, 2, 3], [0, 5, 7]], np.int64)),
          ("cos_cache", cos), ("sin_cache", sin)], ["output"], rotary_embedding_dim=4,
         num_heads=2)
    ids = rng.integers(0, 10, (2, 4)).astype(np.int32)
    seg = rng.integers(0, 2, (2, 4)).astype(np.int32)
    emb = [("word_embedding", f32(10, 8)), ("position_embedding", f32(6, 8))]
    norm = [("gamma", f32(8)), ("beta", f32(8))]
    case("embedlayernorm_all", "EmbedLayerNormalization",
         [("input_ids", ids), ("segment_ids", seg)] + emb + [("segment_embedding", f32(2, 8))] +
         norm + [("mask", np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int32))],
         ["output", "mask_index", "embedding_sum"], out_type=[np.float32, np.int32, np.float32],
         epsilon=1e-5)
    case("embedlayernorm_positions_nomask", "EmbedLayerNormalization",
         [("input_ids", ids), ("", None)] + emb + [("", None)] + norm +
         [("", None), ("position_ids", np.array([[3, 2, 1, 0], [0, 1, 2, 5]], np.int32))],
         ["output", "mask_index"], out_type=[np.float32, np.int32])
    main_quantized_matmuls()
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def pack(codes, bits):
    """Codes (last axis) packed low bits first, 8 / bits to a byte."""
    per = 8 // bits
    c = codes.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint32)
    return sum(c[..., i] << (i * bits) for i in range(per)).astype(np.uint8)


def main_quantized_matmuls():
    """MatMulNBits and the other quantized matrix products, with their own random stream so that
    the cases above stay as they were."""
    global rng
    saved, rng = rng, np.random.default_rng(21)
    for bits, K, block, zp in [(4, 32, 16, "packed"), (4, 40, 16, None), (4, 64, 32, "float"),
                               (2, 32, 16, "packed")]:
        N, blocks = 5, -(-K // block)
        codes = rng.integers(0, 1 << bits, (N, blocks * block))
        B = pack(codes, bits).reshape(N, blocks, block * bits // 8)
        ins = [("A", f32(2, 3, K)), ("B", B), ("scales", f32(N * blocks, lo=0.01, hi=0.1))]
        if zp == "packed":
            z = rng.integers(0, 1 << bits, (N, blocks))
            per = 8 // bits
            z = np.pad(z, ((0, 0), (0, -blocks % per)))
            ins.append(("zero_points", pack(z, bits).reshape(-1)))
        elif zp == "float":
            ins.append(("zero_points", f32(N * blocks, lo=100, hi=150)))
        else:
            ins.append(("", None))
        ins += [("", None), ("bias", f32(N))]
        case(f"matmulnbits_{bits}bit_k{K}_{zp or 'nozp'}", "MatMulNBits", ins, ["Y"], K=K, N=N,
             bits=bits, block_size=block)
    a8 = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b8 = rng.integers(-128, 127, (4, 5)).astype(np.int8)
    case("matmulintegertofloat", "MatMulIntegerToFloat",
         [("A", a8), ("B", b8), ("a_scale", np.array(0.02, np.float32)),
          ("b_scale", f32(5, lo=0.01, hi=0.05)), ("a_zero_point", np.array(120, np.uint8)),
          ("b_zero_point", np.array([1, -2, 0, 3, 4], np.int8)), ("bias", f32(5))], ["Y"],
         out_type=np.float32)
    case("dynamicquantizematmul", "DynamicQuantizeMatMul",
         [("A", f32(3, 4, lo=-2, hi=3)), ("B", b8), ("b_scale", f32(5, lo=0.01, hi=0.05)),
          ("b_zero_point", np.zeros(5, np.int8)), ("bias", f32(5))], ["Y"])
    case("matmulinteger16", "MatMulInteger16",
         [("A", rng.integers(-3000, 3000, (2, 3, 4)).astype(np.int16)),
          ("B", rng.integers(-3000, 3000, (4, 2)).astype(np.int16))], ["Y"], out_type=np.int32)
    rng = saved


def main_onnx():
    """The ai.onnx operators after opset 17, with their own random stream so that the contrib
    cases above stay as they were."""
    global rng
    rng = np.random.default_rng(18)
    shutil.rmtree(OUT_ONNX, ignore_errors=True)
    os.makedirs(OUT_ONNX)
    c = f32(2, 3, 4, lo=0.5, hi=1.5)
    case("cumprod", "CumProd", [("x", c), ("axis", np.array(1, np.int64))], ["y"], onnx_opset=26)
    case("cumprod_exclusive_reverse", "CumProd", [("x", c), ("axis", np.array(-1, np.int32))],
         ["y"], onnx_opset=26, exclusive=1, reverse=1)
    case("cumprod_int", "CumProd",
         [("x", rng.integers(-3, 4, (3, 5)).astype(np.int64)), ("axis", np.array(0, np.int64))],
         ["y"], onnx_opset=26)
    theta2, theta3 = f32(2, 2, 3), f32(2, 3, 4)
    case("affinegrid_2d", "AffineGrid", [("theta", theta2), ("size", np.array([2, 3, 4, 5]))],
         ["grid"], onnx_opset=20)
    case("affinegrid_2d_aligned", "AffineGrid",
         [("theta", theta2), ("size", np.array([2, 1, 3, 2]))], ["grid"], onnx_opset=20,
         align_corners=1)
    case("affinegrid_3d", "AffineGrid", [("theta", theta3), ("size", np.array([2, 1, 2, 3, 4]))],
         ["grid"], onnx_opset=20)
    case("affinegrid_3d_aligned", "AffineGrid",
         [("theta", theta3), ("size", np.array([2, 1, 3, 2, 4]))], ["grid"], onnx_opset=20,
         align_corners=1)
    case("col2im", "Col2Im",
         [("input", f32(1, 2 * 4, 12)), ("image_shape", np.array([4, 5])),
          ("block_shape", np.array([2, 2]))], ["output"], onnx_opset=18)
    case("col2im_strides_pads_dilations", "Col2Im",
         [("input", f32(2, 3 * 6, 6)), ("image_shape", np.array([5, 6])),
          ("block_shape", np.array([2, 3]))], ["output"], onnx_opset=18, strides=[2, 2],
         pads=[1, 0, 0, 1], dilations=[2, 1])
    case("col2im_1d", "Col2Im",
         [("input", f32(1, 3, 5)), ("image_shape", np.array([7])), ("block_shape", np.array([3]))],
         ["output"], onnx_opset=18)
    case("col2im_3d", "Col2Im",
         [("input", f32(1, 8, 12)), ("image_shape", np.array([3, 4, 3])),
          ("block_shape", np.array([2, 2, 2]))], ["output"], onnx_opset=18)
    cache, upd = f32(2, 3, 5, 4), f32(2, 3, 2, 4)
    case("tensorscatter_default", "TensorScatter", [("past_cache", cache), ("update", upd)],
         ["present_cache"], onnx_opset=24)
    case("tensorscatter_linear", "TensorScatter",
         [("past_cache", cache), ("update", upd), ("write_indices", np.array([3, 1]))],
         ["present_cache"], onnx_opset=24)
    case("tensorscatter_circular_axis1", "TensorScatter",
         [("past_cache", f32(2, 4, 3)), ("update", f32(2, 3, 3)),
          ("write_indices", np.array([2, 3]))], ["present_cache"], onnx_opset=24,
         mode="circular", axis=1)
    case("tensorscatter_int", "TensorScatter",
         [("past_cache", rng.integers(-9, 9, (1, 2, 6)).astype(np.int32)),
          ("update", rng.integers(-9, 9, (1, 2, 2)).astype(np.int32)),
          ("write_indices", np.array([4]))], ["present_cache"], onnx_opset=24, axis=-1)
    case("bitcast_float_int32", "BitCast", [("input", f32(2, 3))], ["output"], onnx_opset=26,
         to=TensorProto.INT32, out_type=np.int32)
    case("bitcast_int16_uint16", "BitCast",
         [("input", rng.integers(-30000, 30000, (5,)).astype(np.int16))], ["output"],
         onnx_opset=26, to=TensorProto.UINT16, out_type=np.uint16)
    case("bitcast_int64_double", "BitCast",
         [("input", np.array([0, 4607182418800017408, -4616189618054758400], np.int64))],
         ["output"], onnx_opset=26, to=TensorProto.DOUBLE, out_type=np.float64)
    words = np.array([["hello world", "  a  b c  "], ["", "x-y--z-"]], dtype=object)
    case("stringsplit_whitespace", "StringSplit", [("X", words)], ["Y", "Z"], onnx_opset=20,
         out_type=[np.object_, np.int64])
    case("stringsplit_delimiter", "StringSplit", [("X", words)], ["Y", "Z"], onnx_opset=20,
         delimiter="-", out_type=[np.object_, np.int64])
    case("stringsplit_maxsplit", "StringSplit", [("X", words)], ["Y", "Z"], onnx_opset=20,
         maxsplit=1, out_type=[np.object_, np.int64])
    case("stringsplit_delimiter_maxsplit", "StringSplit", [("X", words)], ["Y", "Z"],
         onnx_opset=20, delimiter="--", maxsplit=1, out_type=[np.object_, np.int64])
    mails = np.array(["ab@gmail.com", "www.example.com", "x@yahoo.com!", "", "Www.a.com"],
                     dtype=object)
    case("regexfullmatch_email", "RegexFullMatch", [("X", mails)], ["Y"], onnx_opset=20,
         pattern=r"[\w.\-]{0,25}@(yahoo|gmail)\.com", out_type=np.bool_)
    case("regexfullmatch_www", "RegexFullMatch", [("X", mails.reshape(5, 1))], ["Y"],
         onnx_opset=20, pattern=r"www\.[\w.-]+\.\bcom\b", out_type=np.bool_)
    xd = f32(2, 4, 5, 6)
    case("deformconv", "DeformConv",
         [("X", xd), ("W", f32(3, 4, 3, 3)), ("offset", f32(2, 18, 3, 4, lo=-2, hi=2))], ["Y"],
         onnx_opset=19)
    case("deformconv_bias_mask_pads_strides", "DeformConv",
         [("X", xd), ("W", f32(4, 2, 2, 3)), ("offset", f32(2, 2 * 6 * 2, 3, 3, lo=-1.5, hi=1.5)),
          ("B", f32(4)), ("mask", f32(2, 2 * 6, 3, 3, lo=0, hi=1))], ["Y"], onnx_opset=22,
         group=2, offset_group=2, pads=[1, 0, 0, 1], strides=[2, 2], dilations=[1, 1])
    case("deformconv_dilations", "DeformConv",
         [("X", f32(1, 2, 6, 6)), ("W", f32(2, 2, 2, 2)), ("offset", f32(1, 8, 4, 4, lo=-3, hi=3))],
         ["Y"], onnx_opset=19, dilations=[2, 2])
    lp = f32(2, 3, 4)
    lp[1, :, 2] = 0  # a zero vector along axis 1
    case("lpnormalization_l2_axis1", "LpNormalization", [("x", lp)], ["y"], onnx_opset=22,
         axis=1)
    case("lpnormalization_l1", "LpNormalization", [("x", lp)], ["y"], onnx_opset=22, p=1)
    case("lpnormalization_default_opset1", "LpNormalization", [("x", f32(3, 5))], ["y"],
         onnx_opset=18)
    print(f"{OUT_ONNX}: {len(os.listdir(OUT_ONNX))} cases")


def main_kernels():
    """com.microsoft ops with kernels of their own, and the bodies added with them (after the
    cases above, so that their random inputs stay as they were)."""
    a = f32(3, 3) + 3 * np.eye(3, dtype=np.float32)
    case("inverse_3x3", "Inverse", [("X", a)], ["Y"])
    case("inverse_batched", "Inverse", [("X", f32(2, 2, 4, 4) + 2 * np.eye(4, dtype=np.float32))],
         ["Y"])
    case("inverse_double", "Inverse",
         [("X", (f32(5, 5) + 3 * np.eye(5, dtype=np.float32)).astype(np.float64))], ["Y"])
    ints = np.array([0, 1, -1, 123456, 2147483647, -2147483648], np.int32)
    case("murmurhash3_int32", "MurmurHash3", [("X", ints)], ["Y"], out_type=np.uint32)
    case("murmurhash3_int32_seed_signed", "MurmurHash3", [("X", ints.reshape(2, 3))], ["Y"],
         out_type=np.int32, seed=42, positive=0)
    case("murmurhash3_uint32", "MurmurHash3",
         [("X", np.array([0, 7, 4000000000], np.uint32))], ["Y"], out_type=np.uint32, seed=3)
    case("murmurhash3_int64", "MurmurHash3",
         [("X", np.array([0, 1, -5, 1 << 40], np.int64))], ["Y"], out_type=np.uint32)
    case("murmurhash3_float", "MurmurHash3", [("X", f32(2, 3))], ["Y"], out_type=np.int32,
         positive=0)
    case("murmurhash3_string", "MurmurHash3",
         [("X", np.array(["", "a", "ab", "abc", "hello world", "caf\u00e9"], dtype=object))],
         ["Y"], out_type=np.uint32, seed=1)
    case("dynamictimewarping", "DynamicTimeWarping", [("input", f32(5, 7, lo=0, hi=1))],
         ["output"], out_type=np.int32)
    case("dynamictimewarping_3d", "DynamicTimeWarping", [("input", f32(1, 6, 4, lo=0, hi=1))],
         ["output"], out_type=np.int32)
    ids = np.array([[1, 2, 3, 1, 2], [4, 4, 4, 4, 4], [0, 5, 1, 0, 5]], np.int64)
    case("ngramrepeatblock_3", "NGramRepeatBlock", [("input_ids", ids), ("scores", f32(3, 6))],
         ["scores_out"], out_type=np.float32, ngram_size=3)
    case("ngramrepeatblock_2", "NGramRepeatBlock", [("input_ids", ids), ("scores", f32(3, 6))],
         ["scores_out"], out_type=np.float32, ngram_size=2)
    u8 = rng.integers(0, 256, (1, 5, 5, 3)).astype(np.uint8)
    case("nhwcmaxpool_uint8", "NhwcMaxPool", [("x", u8)], ["y"], kernel_shape=[2, 2])
    case("nhwcmaxpool_int8_pads_strides", "NhwcMaxPool",
         [("x", rng.integers(-128, 128, (2, 6, 5, 4)).astype(np.int8))], ["y"],
         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    xq = rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
    sc = lambda v: np.array(v, np.float32)
    case("qlinearaveragepool", "QLinearAveragePool",
         [("X", xq), ("x_scale", sc(0.05)), ("x_zero_point", np.array(128, np.uint8)),
          ("y_scale", sc(0.04)), ("y_zero_point", np.array(120, np.uint8))], ["Y"],
         kernel_shape=[2, 2], strides=[2, 2])
    case("qlinearaveragepool_pads_count_include", "QLinearAveragePool",
         [("X", xq), ("x_scale", sc(0.05)), ("x_zero_point", np.array(100, np.uint8)),
          ("y_scale", sc(0.07)), ("y_zero_point", np.array(90, np.uint8))], ["Y"],
         kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
    case("qlinearaveragepool_channels_last_int8", "QLinearAveragePool",
         [("X", rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8)), ("x_scale", sc(0.1)),
          ("x_zero_point", np.array(3, np.int8)), ("y_scale", sc(0.06)),
          ("y_zero_point", np.array(-4, np.int8))], ["Y"], kernel_shape=[2, 2],
         channels_last=1)
    aq = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    bq = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    case("qgemm_float", "QGemm",
         [("A", aq), ("a_scale", sc(0.02)), ("a_zero_point", np.array(120, np.uint8)),
          ("B", bq), ("b_scale", sc(0.03)), ("b_zero_point", np.array(0, np.int8)),
          ("C", rng.integers(-500, 500, (4,)).astype(np.int32))], ["Y"], out_type=np.float32)
    case("qgemm_alpha_transb_per_column", "QGemm",
         [("A", aq), ("a_scale", sc(0.02)), ("a_zero_point", np.array(120, np.uint8)),
          ("B", np.ascontiguousarray(bq.T)), ("b_scale", sc([0.03, 0.01, 0.02, 0.05])),
          ("b_zero_point", np.array([0, 1, -2, 3], np.int8))], ["Y"], out_type=np.float32,
         alpha=0.5, transB=1)
    case("qgemm_quantized", "QGemm",
         [("A", aq), ("a_scale", sc(0.02)), ("a_zero_point", np.array(120, np.uint8)),
          ("B", bq), ("b_scale", sc(0.03)), ("b_zero_point", np.array(0, np.int8)),
          ("C", rng.integers(-500, 500, (3, 4)).astype(np.int32)), ("y_scale", sc(0.05)),
          ("y_zero_point", np.array(128, np.uint8))], ["Y"], out_type=np.uint8)
    case("unfoldtensor_dim1", "UnfoldTensor", [("input", f32(2, 7, 3))], ["output"], dim=1,
         size=3, step=2)
    case("unfoldtensor_last", "UnfoldTensor", [("input", f32(4, 10))], ["output"], size=4,
         step=3)
    case("unfoldtensor_int64_dim0", "UnfoldTensor",
         [("input", rng.integers(-9, 9, (5, 2)).astype(np.int64))], ["output"], dim=0, size=2)
    # GroupQueryAttention: 4 query heads over 2 key/value heads of size 16.
    B, S, N, KV, H = 2, 4, 4, 2, 16  # ONNX Runtime rotates heads of a multiple of 16
    i32 = lambda v: np.array(v, np.int32)
    cos_sin = lambda n, d: (np.cos(np.outer(np.arange(n), 1.0 / 10000 ** (np.arange(d) / d)))
                            .astype(np.float32),
                            np.sin(np.outer(np.arange(n), 1.0 / 10000 ** (np.arange(d) / d)))
                            .astype(np.float32))
    cos, sin = cos_sin(16, H // 2)
    case("gqa_prompt", "GroupQueryAttention",
         [("query", f32(B, S, N * H)), ("key", f32(B, S, KV * H)), ("value", f32(B, S, KV * H)),
          ("", None), ("", None), ("seqlens_k", i32([S - 1, S - 1])),
          ("total_sequence_length", i32(S))], ["output", "present_key", "present_value"],
         num_heads=N, kv_num_heads=KV)
    case("gqa_packed_rotary", "GroupQueryAttention",
         [("query", f32(B, S, (N + 2 * KV) * H)), ("", None), ("", None), ("", None), ("", None),
          ("seqlens_k", i32([S - 1, S - 1])), ("total_sequence_length", i32(S)),
          ("cos_cache", cos), ("sin_cache", sin)], ["output", "present_key", "present_value"],
         num_heads=N, kv_num_heads=KV, do_rotary=1)
    P = 5
    case("gqa_decode_past_rotary_interleaved", "GroupQueryAttention",
         [("query", f32(B, 1, N * H)), ("key", f32(B, 1, KV * H)), ("value", f32(B, 1, KV * H)),
          ("past_key", f32(B, KV, P, H)), ("past_value", f32(B, KV, P, H)),
          ("seqlens_k", i32([P, P])), ("total_sequence_length", i32(P + 1)),
          ("cos_cache", cos), ("sin_cache", sin)], ["output", "present_key", "present_value"],
         num_heads=N, kv_num_heads=KV, do_rotary=1, rotary_interleaved=1)
    case("gqa_window_softcap_scale", "GroupQueryAttention",
         [("query", f32(1, 6, N * H)), ("key", f32(1, 6, KV * H)), ("value", f32(1, 6, KV * H)),
          ("", None), ("", None), ("seqlens_k", i32([5])), ("total_sequence_length", i32(6))],
         ["output"], num_heads=N, kv_num_heads=KV, local_window_size=2, softcap=2.0, scale=0.9)
    case("gqa_continue_prompt", "GroupQueryAttention",
         [("query", f32(1, 3, N * H)), ("key", f32(1, 3, KV * H)), ("value", f32(1, 3, KV * H)),
          ("past_key", f32(1, KV, 2, H)), ("past_value", f32(1, KV, 2, H)),
          ("seqlens_k", i32([4])), ("total_sequence_length", i32(5))],
         ["output", "present_key", "present_value"], num_heads=N, kv_num_heads=KV)
    case("gqa_bias_sink", "GroupQueryAttention",
         [("query", f32(2, 3, N * H)), ("key", f32(2, 3, KV * H)), ("value", f32(2, 3, KV * H)),
          ("", None), ("", None), ("seqlens_k", i32([2, 2])), ("total_sequence_length", i32(3)),
          ("", None), ("", None), ("", None), ("attention_bias", f32(2, 1, 3, 3)),
          ("head_sink", f32(N))], ["output"], num_heads=N, kv_num_heads=KV)
    case("gqa_smooth_softmax", "GroupQueryAttention",
         [("query", f32(1, 3, N * H)), ("key", f32(1, 3, KV * H)), ("value", f32(1, 3, KV * H)),
          ("", None), ("", None), ("seqlens_k", i32([2])), ("total_sequence_length", i32(3))],
         ["output"], num_heads=N, kv_num_heads=KV, smooth_softmax=1)
    xc = f32(1, 2, 5, 4)
    wc = f32(2, 3, 3, 3, lo=-0.5, hi=0.5)
    case("convtransposewithdynamicpads", "ConvTransposeWithDynamicPads",
         [("X", xc), ("W", wc), ("Pads", np.array([1, 0, 0, 2], np.int64)), ("B", f32(3))],
         ["Y"], strides=[2, 2])
    # (ONNX Runtime 1.30 aborts on this op without Pads.)
    case("convtransposewithdynamicpads_outpad_dilations", "ConvTransposeWithDynamicPads",
         [("X", xc), ("W", wc), ("Pads", np.array([0, 1, 1, 0], np.int64))], ["Y"],
         strides=[2, 2], output_padding=[1, 0], dilations=[1, 2])
    img = f32(2, 3, 6, 5)
    boxes = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.3, 0.5, 1.2]],
                     np.float32)
    case("cropandresize_bilinear", "CropAndResize",
         [("X", img), ("rois", boxes), ("batch_indices", i32([1, 0, 1])),
          ("crop_size", i32([4, 3]))], ["Y"], extrapolation_value=-1.0)
    case("cropandresize_nearest_1x1", "CropAndResize",
         [("X", img), ("rois", boxes), ("batch_indices", i32([0, 1, 0])),
          ("crop_size", i32([1, 3]))], ["Y"], mode="nearest")
    nk = 6 * 8
    codes = rng.integers(0, 256, (nk // 2,)).astype(np.uint8)
    for qt in (0, 1):
        case(f"matmulbnb4_{'fp4' if qt == 0 else 'nf4'}", "MatMulBnb4",
             [("A", f32(3, 8)), ("B", codes), ("absmax", f32(nk // 16, lo=0.5, hi=2))], ["Y"],
             K=8, N=6, block_size=16, quant_type=qt)
    hidden, heads = 8, 2
    case("qattention", "QAttention",
         [("input", rng.integers(0, 256, (2, 3, hidden)).astype(np.uint8)),
          ("weight", rng.integers(-128, 128, (hidden, 3 * hidden)).astype(np.int8)),
          ("bias", f32(3 * hidden)), ("input_scale", sc(0.01)), ("weight_scale", sc(0.02)),
          ("mask_index", i32([3, 2])), ("input_zero_point", np.array(128, np.uint8)),
          ("weight_zero_point", np.array(0, np.int8))], ["output"], num_heads=heads,
         out_type=np.float32)
    case("qattention_unidirectional", "QAttention",
         [("input", rng.integers(0, 256, (1, 4, hidden)).astype(np.uint8)),
          ("weight", rng.integers(0, 256, (hidden, 3 * hidden)).astype(np.uint8)),
          ("bias", f32(3 * hidden)), ("input_scale", sc(0.01)), ("weight_scale", sc(0.015)),
          ("", None), ("input_zero_point", np.array(120, np.uint8)),
          ("weight_zero_point", np.array(130, np.uint8))], ["output"], num_heads=heads,
         unidirectional=1, out_type=np.float32)
    xm = f32(1, 2, 5, 5)
    mask = rng.integers(0, 2, (1, 1, 5, 5)).astype(np.int32)
    mask[0, 0, :2, :2] = 0  # a window with nothing in it
    case("maxpoolwithmask", "MaxpoolWithMask", [("X", xm), ("M", mask)], ["Y"],
         kernel_shape=[2, 2], strides=[1, 1])
    case("maxpoolwithmask_pads_strides", "MaxpoolWithMask",
         [("X", xm), ("M", rng.integers(0, 2, (1, 1, 5, 5)).astype(np.int32))], ["Y"],
         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    case("maxpoolwithmask_strides_mask_per_channel", "MaxpoolWithMask",
         [("X", xm), ("M", rng.integers(0, 2, (1, 2, 5, 5)).astype(np.int32))], ["Y"],
         kernel_shape=[3, 3], strides=[2, 2])
    case("sampleop", "SampleOp", [("X", f32(2, 3))], ["Y"])
    words = np.array([[3, 1, 4, 1, 5, 2], [7, 2, 0, 0, 0, 0], [5, 5, 5, 6, 0, 0],
                      [1, 0, 0, 0, 0, 0]], np.int32)
    case("wordconvembedding", "WordConvEmbedding",
         [("Sequence", words), ("W", f32(5, 1, 3, 4)), ("B", f32(5)), ("C", f32(8, 4))], ["Y"],
         out_type=np.float32, embedding_size=5, conv_window_size=3, char_embedding_size=4)
    # DFT's negative axes count from the back of every dimension (-2: the last signal axis),
    # and since opset 20 the axis is an input.
    case("dft_negative_axis", "DFT", [("input", f32(3, 4, 1))], ["output"], onnx_opset=17,
         axis=-2)
    case("dft20_axis_input_inverse", "DFT",
         [("input", f32(2, 5, 3, 2)), ("", None), ("axis", np.array(1, np.int64))], ["output"],
         onnx_opset=20, inverse=1)
    case("dft20_default_axis_onesided", "DFT", [("input", f32(2, 3, 6, 1))], ["output"],
         onnx_opset=20, onesided=1)
    case("dft20_length_negative_axis", "DFT",
         [("input", f32(2, 6, 3, 2)), ("dft_length", np.array(8, np.int64)),
          ("axis", np.array(-3, np.int64))], ["output"], onnx_opset=20)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    src = i64([7, 3, 9, 3, 9, 5, 2, 8])
    case("bifurcationdetector_guess_differs", "BifurcationDetector",
         [("src_tokens", src), ("cur_tokens", i64([4, 3])), ("prev_suffix_match_idx", i64(2)),
          ("pred_tokens", i64([9, 3, 9, 6, 1, 1, 1]))], ["tokens", "suffix_match_idx"])
    case("bifurcationdetector_guess_matches", "BifurcationDetector",
         [("src_tokens", src), ("cur_tokens", i64([4])), ("prev_suffix_match_idx", i64(5)),
          ("pred_tokens", i64([5, 2, 8, 1]))], ["tokens", "suffix_match_idx"],
         min_ngram_size=2, max_ngram_size=4)
    case("bifurcationdetector_unique_trigram", "BifurcationDetector",
         [("src_tokens", i64([5, 1, 2, 3, 1, 2, 4])), ("cur_tokens", i64([0, 3, 1, 2])),
          ("prev_suffix_match_idx", i64(0))], ["tokens", "suffix_match_idx"])
    case("bifurcationdetector_match_at_end", "BifurcationDetector",
         [("src_tokens", i64([1, 2, 3])), ("cur_tokens", i64([2, 3])),
          ("prev_suffix_match_idx", i64(0))], ["tokens", "suffix_match_idx"], max_ngram_size=2)
    # MoE: weights [experts, out, in]; 6 rows of 8 over 4 experts.
    E, HID, INTER = 4, 8, 6
    xr, router = f32(6, HID), f32(6, E, lo=-2, hi=2)
    fc1, fc2 = f32(E, INTER, HID), f32(E, HID, INTER)
    case("moe_relu_top2", "MoE", [("input", xr), ("router_probs", router),
                                  ("fc1_experts_weights", fc1), ("", None),
                                  ("fc2_experts_weights", fc2)], ["output"], k=2)
    case("moe_gelu_normalized_bias", "MoE",
         [("input", xr), ("router_probs", router), ("fc1_experts_weights", fc1),
          ("fc1_experts_bias", f32(E, INTER)), ("fc2_experts_weights", fc2),
          ("fc2_experts_bias", f32(E, HID))], ["output"], k=3, normalize_routing_weights=1,
         activation_type="gelu")
    case("moe_silu_3d", "MoE",
         [("input", f32(2, 3, HID)), ("router_probs", router), ("fc1_experts_weights", fc1),
          ("", None), ("fc2_experts_weights", fc2)], ["output"], activation_type="silu")
    case("moe_swiglu_interleaved", "MoE",
         [("input", xr), ("router_probs", router), ("fc1_experts_weights", f32(E, 2 * INTER, HID)),
          ("fc1_experts_bias", f32(E, 2 * INTER)), ("fc2_experts_weights", fc2)], ["output"], k=2,
         activation_type="swiglu", swiglu_fusion=1, activation_alpha=1.702, activation_beta=1.0,
         swiglu_limit=0.5)
    # com.microsoft QLinearConv: ai.onnx's, and channels last.
    xq = rng.integers(0, 256, (1, 5, 6, 4)).astype(np.uint8)  # [N, H, W, C]
    wq = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
    qconv = [("x_scale", np.array(0.02, np.float32)), ("x_zero_point", np.array(120, np.uint8)),
             ("w", wq), ("w_scale", f32(6, lo=0.005, hi=0.02)),
             ("w_zero_point", np.zeros(6, np.int8)), ("y_scale", np.array(0.05, np.float32)),
             ("y_zero_point", np.array(128, np.uint8)),
             ("B", rng.integers(-500, 500, (6,)).astype(np.int32))]
    case("qlinearconv_channels_last_group", "QLinearConv", [("x", xq)] + qconv, ["y"],
         channels_last=1, group=2, pads=[1, 1, 1, 1], strides=[2, 1])
    case("qlinearconv_nchw", "QLinearConv", [("x", xq.transpose(0, 3, 1, 2).copy())] + qconv,
         ["y"], group=2, pads=[1, 1, 1, 1], strides=[2, 1])
    def text(*rows):
        return np.array(rows, dtype=object)
    case("tokenizer_separators_mark", "Tokenizer",
         [("X", text(["the cat,sat", "", "a,b c d,e"], ["x", "hello  world", ",,"]))], ["Y"],
         separators=[" ", ","], mincharnum=1, mark=1, pad_value="#", out_type=np.object_)
    case("tokenizer_tokenexp_mincharnum", "Tokenizer",
         [("X", text("Hello, World! a bc", "x y", "no-1 yes22"))], ["Y"], tokenexp="[a-zA-Z]+",
         mincharnum=2, mark=0, pad_value="", out_type=np.object_)
    case("tokenizer_characters_utf8", "Tokenizer", [("X", text("h\u00e9llo", "\u65e5\u672c"))],
         ["Y"], separators=[""], mincharnum=1, mark=1, pad_value="_", out_type=np.object_)
    case("tokenizer_nothing_left", "Tokenizer", [("X", text("  ", ",, ,"))], ["Y"],
         separators=[" ", ","], mincharnum=1, mark=0, pad_value="#", out_type=np.object_)
    case("tokenizer_longest_alternative", "Tokenizer", [("X", text("xabyab", "aab"))], ["Y"],
         separators=["a|ab"], mincharnum=1, mark=0, pad_value="-", out_type=np.object_)
    # MatMulFpQ4: B as MLAS packs it, per column a run of 32-value blobs (a float32 scale, a
    # zero point byte unless blk_quant_type is 0, then 4-bit codes two a byte), random codes;
    # K not a multiple of 32 leaves a partial last block. ONNX Runtime reads any type but 0 as
    # 1 (type 2's 64-value blocks are refused as the wrong size).
    for qtype, K, shape in [(1, 70, (2, 3)), (0, 40, (5,)), (2, 100, (2, 1, 3))]:
        N, blk = 6, 32
        blocks = -(-K // blk)
        blobs = bytearray()
        for _ in range(N * blocks):
            blobs += np.float32(rng.uniform(0.01, 0.2)).tobytes()
            if qtype != 0:
                blobs += bytes([int(rng.integers(0, 16))])
            blobs += rng.integers(0, 256, blk // 2).astype(np.uint8).tobytes()
        case(f"matmulfpq4_type{qtype}", "MatMulFpQ4",
             [("A", f32(*shape, K)), ("B", np.frombuffer(bytes(blobs), np.uint8).copy()),
              ("B_shape", np.array([K, N], np.int64))], ["Y"], blk_quant_type=qtype)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def gpt_decoder(rng, V=12, H=2, D=4, layers=2, maxpos=32, name="gpt"):
    """A one- or two-layer GPT-2-style decoder as GreedySearch/Sampling/BeamSearch call it."""
    E = H * D
    nodes, inits = [], []
    def init(n, a):
        inits.append(numpy_helper.from_array(a, n)); return n
    def node(op, ins, outs, **kw):
        nodes.append(helper.make_node(op, ins, outs, **kw)); return outs[0]
    def const(n, v, dt=np.int64):
        return init(n, np.array(v, dt))
    w = lambda *s, sc=0.7: rng.normal(0, sc, s).astype(np.float32)
    x = node("Add", [node("Gather", [init("wte", w(V, E)), "input_ids"], ["tok"]),
                     node("Gather", [init("wpe", w(maxpos, E, sc=0.3)), "position_ids"], ["pos"])], ["x0"])
    # mask bias [B,1,1,T]: 0 where attended, -10000 where not
    maskf = node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [init("one", np.array(1, np.float32)), maskf], ["inv"]),
                        init("big", np.array(-10000, np.float32))], ["mbias0"])
    bias = node("Unsqueeze", [bias, const("ax12", [1, 2])], ["mbias"])
    # causal [S,T]: Trilu(ones, k=T-S, lower)
    sh_x = node("Shape", ["input_ids"], ["sx"])
    sh_m = node("Shape", ["attention_mask"], ["sm"])
    S = node("Gather", [sh_x, const("i1", 1)], ["S"])
    T = node("Gather", [sh_m, const("i1b", 1)], ["T"])
    ST = node("Concat", [node("Unsqueeze", [S, const("a0", [0])], ["S1"]),
                         node("Unsqueeze", [T, const("a0b", [0])], ["T1"])], ["ST"], axis=0)
    ones = node("ConstantOfShape", [ST], ["ones"], value=numpy_helper.from_array(np.array([1], np.float32)))
    tri = node("Trilu", [ones, node("Sub", [T, S], ["P"])], ["tri"], upper=0)
    causal = node("Mul", [node("Sub", [init("one2", np.array(1, np.float32)), tri], ["ntri"]),
                          init("big2", np.array(-10000, np.float32))], ["cbias"])
    h = x
    outs = []
    for l in range(layers):
        p = f"l{l}_"
        kv = node("MatMul", [h, init(p + "wkv", w(E, 2 * E, sc=0.5))], [p + "kv"])
        kv = node("Reshape", [kv, const(p + "s5", [0, 0, 2, H, D])], [p + "kv5"])
        kv = node("Transpose", [kv], [p + "kvT"], perm=[2, 0, 3, 1, 4])
        present = node("Concat", [f"past_{l}", kv], [f"present_{l}"], axis=3)
        k = node("Gather", [present, const(p + "z", 0)], [p + "k"])
        v = node("Gather", [present, const(p + "o", 1)], [p + "v"])
        q = node("MatMul", [h, init(p + "wq", w(E, E, sc=0.5))], [p + "q"])
        q = node("Transpose", [node("Reshape", [q, const(p + "s4", [0, 0, H, D])], [p + "q4"])], [p + "qT"], perm=[0, 2, 1, 3])
        sc = node("MatMul", [q, node("Transpose", [k], [p + "kT"], perm=[0, 1, 3, 2])], [p + "sc"])
        sc = node("Add", [node("Add", [node("Mul", [sc, init(p + "scale", np.array(1 / np.sqrt(D), np.float32))], [p + "scs"]), bias], [p + "scm"]), causal], [p + "scc"])
        pr = node("Softmax", [sc], [p + "pr"], axis=-1)
        o = node("Transpose", [node("MatMul", [pr, v], [p + "o4"])], [p + "oT"], perm=[0, 2, 1, 3])
        o = node("Reshape", [o, const(p + "s3", [0, 0, E])], [p + "o3"])
        h = node("Add", [h, node("MatMul", [o, init(p + "wo", w(E, E, sc=0.5))], [p + "proj"])], [p + "h"])
        outs.append(f"present_{l}")
    node("MatMul", [h, init("wlm", w(E, V, sc=0.8))], ["logits"])
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT32, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "total"])]
    inputs += [helper.make_tensor_value_info(f"past_{l}", TensorProto.FLOAT, [2, "batch", H, "past", D]) for l in range(layers)]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", V])]
    outputs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, "batch", H, "total", D]) for o in outs]
    return helper.make_graph(nodes, name, inputs, outputs, inits)


def main_generation():
    """GreedySearch and Sampling over a small GPT-2-style decoder (gpt_decoder), as ONNX Runtime
    runs them: left-padded prompts, the logits options, and seeded draws."""
    g = np.random.default_rng(5)
    dec2, dec1 = gpt_decoder(g, layers=2), gpt_decoder(g, layers=1, name="gpt1")
    prompt = np.array([[3, 5, 7, 2], [1, 1, 4, 9]], np.int32)  # pad_token_id 1, left padding
    maxlen = np.array([12], np.int32)
    case("greedysearch_gpt_padded", "GreedySearch", [("input_ids", prompt), ("max_length", maxlen)],
         ["sequences"], decoder=dec2, eos_token_id=11, pad_token_id=1)
    V = 12
    vocab_mask = np.ones(V, np.int32)
    vocab_mask[[0, 6]] = 0
    prefix = np.ones((2, V), np.int32)
    prefix[0, [2, 8]] = 0
    prefix[1, [4, 10]] = 0
    case("greedysearch_gpt_options", "GreedySearch",
         [("input_ids", prompt), ("max_length", np.array([14], np.int32)),
          ("min_length", np.array([9], np.int32)), ("repetition_penalty", np.array([1.4], np.float32)),
          ("vocab_mask", vocab_mask), ("prefix_vocab_mask", prefix),
          ("attention_mask", np.array([[1, 1, 1, 1], [0, 1, 1, 1]], np.int32))],
         ["sequences"], decoder=dec1, eos_token_id=3, pad_token_id=1, no_repeat_ngram_size=2)
    case("greedysearch_gpt_one_row_eos", "GreedySearch",
         [("input_ids", np.array([[2, 9, 4]], np.int32)), ("max_length", np.array([10], np.int32))],
         ["sequences"], decoder=dec1, eos_token_id=5, pad_token_id=0)
    # Sampling's optional inputs up to seed (input 8); "" leaves one out.
    def sampling_inputs(seed, presence=None, min_length=None):
        skip = ("", None)
        return [("input_ids", prompt), ("max_length", maxlen),
                ("min_length", np.array([min_length], np.int32)) if min_length else skip,
                skip, skip, skip, skip,
                ("presence_mask", presence) if presence is not None else skip,
                ("seed", np.array([seed], np.int32))]
    case("sampling_gpt_top_p_small", "Sampling", sampling_inputs(3), ["sequences"], decoder=dec2,
         eos_token_id=11, pad_token_id=1, top_p=0.02)
    case("sampling_gpt_seeded", "Sampling", sampling_inputs(7, min_length=7), ["sequences"],
         decoder=dec2, eos_token_id=11, pad_token_id=1, top_p=0.9, temperature=1.5)
    # presence_penalty is left out: ONNX Runtime 1.30 subtracts the whole mask's sum from the
    # first score alone (its loop never advances), where deepwire penalizes the masked tokens.
    presence = np.zeros((2, V), np.int32)
    presence[:, [5, 7]] = 1
    case("sampling_gpt_custom", "Sampling", sampling_inputs(11, presence), ["sequences"],
         decoder=dec1, eos_token_id=11, pad_token_id=1, top_p=0.6, custom=1,
         min_tokens_to_keep=2)
    case("sampling_gpt_no_seed_input_steps", "Sampling", sampling_inputs(0), ["sequences"],
         decoder=dec1, eos_token_id=11, pad_token_id=1, top_p=0.95, temperature=0.7)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def main_decoder_attention():
    """DecoderMaskedMultiHeadAttention's decoding step: self-attention into a shared key/value
    cache (separate and packed key/value, bias, key padding mask, attention bias, the scores
    output) and cross-attention to an encoder's keys."""
    g = np.random.default_rng(17)
    f = lambda *shape: g.uniform(-1, 1, shape).astype(np.float32)
    B, N, H, L, P = 2, 2, 4, 6, 3
    D = N * H
    skip = ("", None)
    past_k, past_v = f(B, N, L, H), f(B, N, L, H)
    mask = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], np.int32)
    case("dmmha_self_bias_mask_qk", "DecoderMaskedMultiHeadAttention",
         [("query", f(B, 1, D)), ("key", f(B, 1, D)), ("value", f(B, 1, D)), ("mask_index", mask),
          ("attention_bias", f(B, N, 1, P + 1)), ("past_key", past_k), ("past_value", past_v),
          ("past_sequence_length", np.array([P], np.int32)), skip, skip, ("bias", f(3 * D))],
         ["output", "present_key", "present_value", "qk"], num_heads=N,
         past_present_share_buffer=1, output_qk=1)
    # The cache's last slot. (ONNX Runtime's CPU kernel refuses a query packed with key and
    # value, and at past_sequence_length 0 writes the new key and value at the wrong offsets of
    # the cache; the engine tests check those forms against the separate one and a longer past.)
    case("dmmha_self_last_slot_scale", "DecoderMaskedMultiHeadAttention",
         [("query", f(B, 1, D)), ("key", f(B, 1, D)), ("value", f(B, 1, D)), skip, skip,
          ("past_key", past_k), ("past_value", past_v),
          ("past_sequence_length", np.array([L - 1], np.int32))],
         ["output", "present_key", "present_value"], num_heads=N, past_present_share_buffer=1,
         scale=0.3)
    case("dmmha_cross", "DecoderMaskedMultiHeadAttention",
         [("query", f(B, 1, D)), ("key", f(B, N, 5, H)), ("value", f(B, N, 5, H)),
          ("mask_index", np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32))],
         ["output"], num_heads=N)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def main_lstm_variants():
    """DynamicQuantizeLSTM (uint8 and int8 codes, scales per column or per direction, a nonzero
    zero point, sequence lengths, both directions, clip, input_forget, other activations) on one
    thread: ONNX Runtime's CPU kernel on several quantizes h in slices of the batch, each over its
    own range. AttnLSTM with and without its attention layer AW, memory lengths, both
    directions."""
    g = np.random.default_rng(29)
    f = lambda *shape: g.uniform(-1, 1, shape).astype(np.float32)
    T, N, I, H = 5, 3, 4, 6
    G = 4 * H
    skip = ("", None)

    def codes(dt, *shape):
        return (g.integers(-128, 128, shape) if dt == np.int8 else
                g.integers(0, 256, shape)).astype(dt)

    def dq(name, dt, D, per_column, zp=0, lens=None, with_state=True, **attrs):
        sshape = (D, G) if per_column else (D,)
        ins = [("X", f(T, N, I)), ("W", codes(dt, D, I, G)), ("R", codes(dt, D, H, G)),
               ("B", f(D, 8 * H)) if with_state else skip,
               ("sequence_lens", np.array(lens, np.int32)) if lens else skip,
               ("initial_h", f(D, N, H)) if with_state else skip,
               ("initial_c", f(D, N, H)) if with_state else skip,
               ("P", f(D, 3 * H)) if with_state else skip,
               ("W_scale", g.uniform(0.002, 0.01, sshape).astype(np.float32)),
               ("W_zero_point", np.full(sshape, zp, dt)),
               ("R_scale", g.uniform(0.002, 0.01, sshape).astype(np.float32)),
               ("R_zero_point", np.full(sshape, zp, dt))]
        case(name, "DynamicQuantizeLSTM", ins, ["Y", "Y_h", "Y_c"], out_type=np.float32,
             threads=1, hidden_size=H, **attrs)

    dq("dqlstm_uint8_per_column", np.uint8, 1, True, zp=128)
    dq("dqlstm_int8_per_direction_zp", np.int8, 1, False, zp=3)
    dq("dqlstm_reverse_lengths", np.uint8, 1, False, zp=120, lens=[5, 2, 4], direction="reverse")
    dq("dqlstm_bidirectional_lengths", np.int8, 2, True, lens=[3, 5, 1], direction="bidirectional")
    dq("dqlstm_clip_input_forget_acts", np.uint8, 1, True, zp=128, with_state=False, clip=0.5,
       input_forget=1, activations=["HardSigmoid", "LeakyRelu", "Tanh"],
       activation_alpha=[0.3, 0.2], activation_beta=[0.4])

    Tm, Dm, Aa, Aw = 7, 4, 5, 3

    def attn(name, D, with_aw, lens=None, mlens=None, **attrs):
        A = Aw if with_aw else Dm
        ins = [("X", f(T, N, I)), ("W", f(D, G, I + A)), ("R", f(D, G, H)), ("B", f(D, 8 * H)),
               ("sequence_lens", np.array(lens, np.int32)) if lens else skip,
               ("initial_h", f(D, N, H)), ("initial_c", f(D, N, H)), ("P", f(D, 3 * H)),
               ("QW", f(D, H, Aa)), ("MW", f(D, Dm, Aa)), ("V", f(D, Aa)), ("M", f(N, Tm, Dm)),
               ("memory_seq_lens", np.array(mlens, np.int32)) if mlens else skip,
               ("AW", f(D, H + Dm, Aw)) if with_aw else skip]
        while ins[-1] == skip:
            ins.pop()
        case(name, "AttnLSTM", ins, ["Y", "Y_h", "Y_c"], hidden_size=H, **attrs)

    attn("attnlstm_aw", 1, True)
    attn("attnlstm_lengths", 1, False, lens=[4, 2, 3], mlens=[7, 3, 1])
    attn("attnlstm_reverse", 1, True, lens=[4, 2, 3], mlens=[2, 7, 5], direction="reverse")
    attn("attnlstm_bidirectional_clip", 2, False, lens=[1, 4, 2], direction="bidirectional",
         clip=0.3, input_forget=1)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def main_qmoe():
    """QMoE's integer forms: 8-, 4- and 2-bit codes, a scale per row or per block of 16, zero
    points packed like the codes or implicit, the activations (swiglu interleaved with GPT-OSS's
    constants), router_weights, a 3-D input."""
    g = np.random.default_rng(41)
    f = lambda *shape: g.uniform(-1, 1, shape).astype(np.float32)
    T, Hd, I, E = 5, 32, 32, 4
    skip = ("", None)

    def packed(rows, cols, bits):
        return g.integers(0, 256, (E, rows, cols * bits // 8)).astype(np.uint8)

    def qcase(name, bits, block, zp, act="relu", k=2, biases=True, router=False, x3d=False,
              **attrs):
        n1 = 2 * I if act == "swiglu" else I
        per = 8 // bits
        fcs = []
        for rows, cols in ((n1, Hd), (Hd, I)):
            nb = cols // block if block else 0
            scales = (g.uniform(0.002, 0.02, (E, rows, nb)) if block else
                      g.uniform(0.002, 0.02, (E, rows))).astype(np.float32)
            z = None
            if zp:
                z = (g.integers(0, 256, (E, rows, -(-nb // per))) if block else
                     g.integers(0, 256, (E, -(-rows // per)))).astype(np.uint8)
            fcs.append((packed(rows, cols, bits), scales, f(E, rows) if biases else None, z))
        x = f(2, 3, Hd) if x3d else f(T, Hd)
        rows_n = 6 if x3d else T
        ins = [("input", x), ("router_probs", f(rows_n, E) * 3)]
        (w1, s1, b1, z1), (w2, s2, b2, z2) = fcs
        ins += [("fc1_experts_weights", w1), ("fc1_scales", s1),
                ("fc1_experts_bias", b1) if b1 is not None else skip,
                ("fc2_experts_weights", w2), ("fc2_scales", s2),
                ("fc2_experts_bias", b2) if b2 is not None else skip, skip, skip, skip,
                ("fc1_zero_points", z1) if z1 is not None else skip,
                ("fc2_zero_points", z2) if z2 is not None else skip, skip,
                ("router_weights", g.uniform(0, 1, (rows_n, E)).astype(np.float32))
                if router else skip]
        while ins[-1] == skip:
            ins.pop()
        extra = {"block_size": block} if block else {}
        case(name, "QMoE", ins, ["output"], k=k, expert_weight_bits=bits, activation_type=act,
             **extra, **attrs)

    qcase("qmoe_8bit_rows_relu", 8, 0, False)
    qcase("qmoe_4bit_rows_zp_gelu", 4, 0, True, act="gelu", k=1)
    qcase("qmoe_4bit_block16_zp_silu", 4, 16, True, act="silu", biases=False)
    qcase("qmoe_2bit_block16_swiglu", 2, 16, False, act="swiglu", swiglu_fusion=1,
          activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0)
    qcase("qmoe_8bit_block16_router_weights", 8, 16, True, act="identity", k=3, router=True,
          normalize_routing_weights=1)
    qcase("qmoe_8bit_rows_3d", 8, 0, True, k=2, x3d=True)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


def whisper_graphs(rng, V, prompt_len, D=4, F=3, T=5):
    """A toy Whisper for WhisperBeamSearch: one decoder layer of one head (size D), its
    encoder subgraph (features [B, F, T] -> hidden states, the prompt's logits, the self and
    cross keys and values) and its decoder subgraph (one token per beam, with the past)."""
    W = {k: (rng.standard_normal(shape) * sc).astype(np.float32) for k, shape, sc in
         [("We", (F, D), 1.0), ("Wck", (D, D), 0.7), ("Wcv", (D, D), 0.7), ("E", (V, D), 1.0),
          ("Wq", (D, D), 0.7), ("Wk", (D, D), 0.7), ("Wv", (D, D), 0.7), ("Wo", (D, V), 1.5)]}
    const = lambda name, a: helper.make_node("Constant", [], [name],
                                             value=numpy_helper.from_array(a, name + "_v"))
    node = helper.make_node
    vi = helper.make_tensor_value_info

    def attention(p, causal):
        # emb [B, L, D]; pk, pv [B, 1, P, D]; ck, cv [B, 1, T, D] -> logits [B, L, V]
        n = [const(p + "Wq", W["Wq"]), const(p + "Wk", W["Wk"]), const(p + "Wv", W["Wv"]),
             const(p + "ax1", np.array([1], np.int64)), const(p + "half", np.array(0.5, np.float32))]
        for x in "qkv":
            n += [node("MatMul", ["emb", p + "W" + x], [x + "3"]),
                  node("Unsqueeze", [x + "3", p + "ax1"], [x])]
        n += [node("Concat", ["pk", "k"], ["Kall"], axis=2),
              node("Concat", ["pv", "v"], ["Vall"], axis=2),
              node("Transpose", ["Kall"], ["KT"], perm=[0, 1, 3, 2]),
              node("MatMul", ["q", "KT"], ["s0"]), node("Mul", ["s0", p + "half"], ["s1"])]
        if causal:
            mask = np.triu(np.full((causal, causal), -1e4, np.float32), 1)
            n += [const(p + "mask", mask), node("Add", ["s1", p + "mask"], ["s2"])]
        else:
            n += [node("Identity", ["s1"], ["s2"])]
        n += [node("Softmax", ["s2"], ["pr"], axis=-1), node("MatMul", ["pr", "Vall"], ["ctx4"]),
              node("Squeeze", ["ctx4", p + "ax1"], ["ctx"]),
              node("Transpose", ["ck"], ["cKT"], perm=[0, 1, 3, 2]),
              node("MatMul", ["q", "cKT"], ["cs0"]), node("Mul", ["cs0", p + "half"], ["cs1"]),
              node("Softmax", ["cs1"], ["cp"], axis=-1), node("MatMul", ["cp", "cv"], ["cctx4"]),
              node("Squeeze", ["cctx4", p + "ax1"], ["cctx"]), node("Add", ["emb", "ctx"], ["h1"]),
              node("Add", ["h1", "cctx"], ["h2"]), const(p + "Wo", W["Wo"]),
              node("MatMul", ["h2", p + "Wo"], ["logits"])]
        return n

    enc = [const("We", W["We"]), const("Wck", W["Wck"]), const("Wcv", W["Wcv"]),
           const("E", W["E"]), const("ax1e", np.array([1], np.int64)),
           node("Transpose", ["encoder_input_ids"], ["ft"], perm=[0, 2, 1]),
           node("MatMul", ["ft", "We"], ["hs0"]), node("Tanh", ["hs0"], ["encoder_hidden_states"]),
           node("MatMul", ["encoder_hidden_states", "Wck"], ["ck3"]),
           node("Unsqueeze", ["ck3", "ax1e"], ["ck"]),
           node("MatMul", ["encoder_hidden_states", "Wcv"], ["cv3"]),
           node("Unsqueeze", ["cv3", "ax1e"], ["cv"]),
           node("Gather", ["E", "decoder_input_ids"], ["emb"]),
           node("Shape", ["decoder_input_ids"], ["dshape"]),
           const("i0", np.array([0], np.int64)), const("i1", np.array([1], np.int64)),
           node("Slice", ["dshape", "i0", "i1"], ["bdim"]),
           const("rest", np.array([1, 0, D], np.int64)),
           node("Concat", ["bdim", "rest"], ["pshape"], axis=0),
           node("ConstantOfShape", ["pshape"], ["pk"],
                value=numpy_helper.from_array(np.array([0], np.float32))),
           node("Identity", ["pk"], ["pv"])]
    enc += attention("a", prompt_len)
    enc += [node("Identity", ["Kall"], ["present_key_self_0"]),
            node("Identity", ["Vall"], ["present_value_self_0"]),
            node("Identity", ["ck"], ["present_key_cross_0"]),
            node("Identity", ["cv"], ["present_value_cross_0"])]
    encoder = helper.make_graph(
        enc, "encoder",
        [vi("encoder_input_ids", TensorProto.FLOAT, ["B", F, T]),
         vi("decoder_input_ids", TensorProto.INT32, ["B", "L"])],
        [vi("logits", TensorProto.FLOAT, ["B", "L", V]),
         vi("encoder_hidden_states", TensorProto.FLOAT, ["B", T, D]),
         vi("present_key_self_0", TensorProto.FLOAT, ["B", 1, "L", D]),
         vi("present_value_self_0", TensorProto.FLOAT, ["B", 1, "L", D]),
         vi("present_key_cross_0", TensorProto.FLOAT, ["B", 1, T, D]),
         vi("present_value_cross_0", TensorProto.FLOAT, ["B", 1, T, D])])
    dec = [const("E", W["E"]), node("Gather", ["E", "input_ids"], ["emb"])]
    for x, y in (("pk", "past_key_self_0"), ("pv", "past_value_self_0"),
                 ("ck", "past_key_cross_0"), ("cv", "past_value_cross_0")):
        dec.append(node("Identity", [y], [x]))
    dec += attention("d", None)
    dec += [node("Identity", ["Kall"], ["present_key_self_0"]),
            node("Identity", ["Vall"], ["present_value_self_0"])]
    decoder = helper.make_graph(
        dec, "decoder",
        [vi("input_ids", TensorProto.INT32, ["B", 1]),
         vi("encoder_hidden_states", TensorProto.FLOAT, ["B", T, D]),
         vi("past_key_self_0", TensorProto.FLOAT, ["B", 1, "P", D]),
         vi("past_value_self_0", TensorProto.FLOAT, ["B", 1, "P", D]),
         vi("past_key_cross_0", TensorProto.FLOAT, ["B", 1, T, D]),
         vi("past_value_cross_0", TensorProto.FLOAT, ["B", 1, T, D])],
        [vi("logits", TensorProto.FLOAT, ["B", 1, V]),
         vi("present_key_self_0", TensorProto.FLOAT, ["B", 1, "P1", D]),
         vi("present_value_self_0", TensorProto.FLOAT, ["B", 1, "P1", D])])
    return encoder, decoder


def main_whisper():
    """WhisperBeamSearch on a toy encoder-decoder: beams, a prompt, the processors (repetition
    penalty, vocabulary masks, minimum length, temperature, n-gram blocking), length penalty,
    early stopping, and Whisper's timestamp rules."""
    g = np.random.default_rng(53)
    F, T = 3, 5

    def wcase(name, B=2, V=12, prompt_len=1, max_length=8, beams=3, returns=2, lp=1.0, rep=1.0,
              min_length=0, extra=(), **attrs):
        encoder, decoder = whisper_graphs(np.random.default_rng(7), V, prompt_len)
        prompt = (np.full((B, 1), 2, np.int32) if prompt_len == 1 else
                  g.integers(2, V, (B, prompt_len)).astype(np.int32))
        ins = [("input_ids", g.standard_normal((B, F, T)).astype(np.float32)),
               ("max_length", np.array([max_length], np.int32)),
               ("min_length", np.array([min_length], np.int32)),
               ("num_beams", np.array([beams], np.int32)),
               ("num_return_sequences", np.array([returns], np.int32)),
               ("length_penalty", np.array([lp], np.float32)),
               ("repetition_penalty", np.array([rep], np.float32))]
        more = dict(extra)
        ins += [(n, more[n]) if n in more else ("", None)
                for n in ("vocab_mask", "prefix_vocab_mask", "attention_mask")]
        ins += [("decoder_input_ids", prompt)]
        ins += [(n, more[n]) if n in more else ("", None)
                for n in ("logits_processor", "cross_qk_layer_head", "extra_decoding_ids",
                          "temperature")]
        while ins[-1][0] == "":
            ins.pop()
        case(name, "WhisperBeamSearch", ins, ["sequences", "sequences_scores"],
             out_type=[np.int32, np.float32], encoder=encoder, decoder=decoder, eos_token_id=1,
             pad_token_id=0, **attrs)

    wcase("whisperbeamsearch_beams")
    wcase("whisperbeamsearch_prompt_length_penalty", prompt_len=3, max_length=10, lp=0.5)
    vm = np.ones(12, np.int32)
    vm[[4, 8]] = 0
    pm = np.ones((2, 12), np.int32)
    pm[0, [10, 4]] = 0
    pm[1, :5] = 0
    wcase("whisperbeamsearch_processors", rep=1.7, min_length=6, max_length=10,
          extra={"vocab_mask": vm, "prefix_vocab_mask": pm,
                 "temperature": np.array([0.6], np.float32)}, no_repeat_ngram_size=2)
    wcase("whisperbeamsearch_early_stopping", max_length=10, early_stopping=1, B=1, beams=4,
          returns=4)
    wcase("whisperbeamsearch_timestamps", V=170, max_length=12,
          extra={"logits_processor": np.array([1], np.int32)}, beginning_timestamp_token_id=100,
          no_timestamps_token_id=99, start_of_lm_token_id=98, decoder_start_token_id=2,
          translate_token_id=97, transcribe_token_id=96)
    print(f"{OUT}: {len(os.listdir(OUT))} cases")


main()
main_onnx()
main_kernels()
main_generation()
main_decoder_attention()
main_lstm_variants()
main_qmoe()
main_whisper()
