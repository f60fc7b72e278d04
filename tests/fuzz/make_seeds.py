#!/usr/bin/python3
"""Writes the fuzz targets' seed corpus (fuzz/targets.h) into tests/fuzz/seeds/<target>/.

Small inputs that reach deep: a model per family of ops (convolutions, recurrences, control
flow, shape arithmetic, newer opsets), projects imported from them with the CLI, and one file
per data format. The data_readers and image targets read their first byte as a selector
(fuzz/targets.cpp); the seeds carry it.

Usage: make_seeds.py DEEPWIRE   (the CLI, for `deepwire import`)
"""
import gzip
import io
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")


def init(name, shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(name, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="seeds")
    m.ir_version = 8
    if opset <= 17:  # this onnx (1.12) knows no newer schemas; deepwire does (schema_facts)
        onnx.checker.check_model(m)
    return m


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def models():
    yield "cnn", model("cnn", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ], [vi("x", [1, 1, 6, 6])], [vi("y", [1, 3])],
        [init("w", [4, 1, 3, 3]), init("b", [4], 1), init("s", [4], 2), init("bb", [4], 3),
         init("m", [4], 4), numpy_helper.from_array(np.ones(4, np.float32), "v"),
         init("fw", [3, 36], 5), init("fb", [3], 6)])
    yield "attention", model("attention", [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "xt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "x"], ["o"]),
        helper.make_node("LayerNormalization", ["o", "g", "be"], ["y"], axis=-1),
    ], [vi("x", [1, 4, 8])], [vi("y", [1, 4, 8])],
        [init("wq", [8, 8]), init("g", [8], 1), init("be", [8], 2)])
    yield "lstm", model("lstm", [
        helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "h"], hidden_size=3),
    ], [vi("x", [5, 2, 4])], [vi("y", [5, 1, 2, 3]), vi("h", [1, 2, 3])],
        [init("w", [1, 12, 4]), init("r", [1, 12, 3], 1), init("b", [1, 24], 2)])
    body = helper.make_graph([
        helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL),
                vi("acc_in", [2])], [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "one")])
    yield "loop", model("loop", [
        helper.make_node("Loop", ["n", "c", "x"], ["y"], body=body),
    ], [vi("x", [2])], [vi("y", [2])],
        [ints("n", 4), numpy_helper.from_array(np.array(True), "c")])
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", [3])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", [3])])
    yield "if", model("if", [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ], [vi("x", [3])], [vi("y", [3])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    yield "shapes", model("shapes", [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Reshape", ["x", "to"], ["r"]),
        helper.make_node("Slice", ["r", "st", "en", "ax"], ["sl"]),
        helper.make_node("Gather", ["sl", "idx"], ["ga"], axis=1),
        helper.make_node("Concat", ["ga", "ga"], ["ca"], axis=0),
        helper.make_node("Unsqueeze", ["ca", "ax"], ["y"]),
        helper.make_node("Cast", ["sh"], ["shf"], to=TensorProto.FLOAT),
    ], [vi("x", [2, 3, 4])], [vi("y", [1, 8, 2]), vi("shf", [3])],
        [ints("to", [6, 4]), ints("st", [1]), ints("en", [5]), ints("ax", [0]),
         ints("idx", [0, 2])])
    yield "opset18", model("opset18", [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Resize", ["d", "", "sc"], ["y"], mode="linear"),
        helper.make_node("Pad", ["y", "pads"], ["p"], mode="reflect"),
    ], [vi("x", [1, 2, 3, 3])], [vi("p", ["n", "c", "h", "w"])],
        [ints("axes", [2, 3]), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"),
         ints("pads", [0, 0, 1, 1, 0, 0, 1, 1])], opset=18)
    # Block floating point, both ways (com.microsoft; this onnx's checker does not know them).
    bfp = helper.make_graph([
        helper.make_node("QuantizeBFP", ["x"], ["q", "shape", "strides"], domain="com.microsoft",
                         bfp_type=1, block_dim=1),
        helper.make_node("DequantizeBFP", ["q", "shape", "strides"], ["y"],
                         domain="com.microsoft", bfp_type=1, block_dim=1),
    ], "bfp", [vi("x", [3, 21, 2])], [vi("y", [3, 21, 2])])
    m = helper.make_model(bfp, opset_imports=[helper.make_opsetid("", 17),
                                              helper.make_opsetid("com.microsoft", 1)],
                          producer_name="seeds")
    m.ir_version = 8
    yield "bfp", m
    yield "strings", model("strings", [
        helper.make_node("Identity", ["x"], ["y"]),
        helper.make_node("ArgMax", ["v"], ["a"], axis=0),
        helper.make_node("TopK", ["v", "k"], ["tv", "ti"]),
    ], [vi("x", [2], TensorProto.STRING), vi("v", [4])],
        [vi("y", [2], TensorProto.STRING), vi("a", [1], TensorProto.INT64), vi("tv", [2]),
         vi("ti", [2], TensorProto.INT64)], [ints("k", [2])])


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# The com.microsoft cases of tests/golden/ort-contrib that seed the ONNX targets too (one node
# each, with its attributes: a family per entry).
MICROSOFT_SEEDS = [
    "attention_lengths", "attention_past", "cdist_euclidean", "convtransposewithdynamicpads",
    "cropandresize_bilinear", "dynamicquantizematmul", "dynamictimewarping_3d",
    "embedlayernorm_all", "expanddims_last", "fusedconv_z_leakyrelu_group",
    "fusedgemm_scaledtanh", "fusedmatmul_transbatcha", "gqa_bias_sink",
    "gqa_decode_past_rotary_interleaved", "gqa_packed_rotary", "gridsample_bicubic_reflection",
    "inverse_batched", "matmulbnb4_nf4", "matmulinteger16", "matmulintegertofloat",
    "matmulnbits_2bit_k32_packed", "matmulnbits_4bit_k32_packed", "matmulnbits_4bit_k40_nozp",
    "matmulnbits_4bit_k64_float", "maxpoolwithmask_pads_strides", "mha_bias_mask_scale",
    "mha_past", "murmurhash3_string", "ngramrepeatblock_3", "nhwcmaxpool_int8_pads_strides",
    "pad_constant", "qattention", "qgemm_quantized", "qlinearaveragepool_channels_last_int8",
    "qlinearconcat_int8", "qlinearglobalaveragepool_nhwc_uint8", "qlinearwhere_int8", "quickgelu",
    "range_int_nodelta", "rotary_3d_start_interleaved", "skiplayernorm_all",
    "moe_swiglu_interleaved", "bifurcationdetector_guess_differs",
    "qlinearconv_channels_last_group", "tokenizer_separators_mark",
    "skipsimplifiedlayernorm_bias", "unfoldtensor_dim1", "unique", "wordconvembedding",
    "matmulfpq4_type1", "greedysearch_gpt_options", "sampling_gpt_seeded",
    "dmmha_self_bias_mask_qk", "dqlstm_bidirectional_lengths", "attnlstm_reverse",
    "qmoe_4bit_block16_zp_silu", "whisperbeamsearch_timestamps",
]

REFERENCE_SEEDS = [
    "biassoftmax_inner", "bitmaskbiasdropout_residual", "gatedrelativepositionbias_packed",
    "irfft_2d_normalized", "moe_silu_fc3_gated", "nhwcfusedconv_z_relu", "rfft_2d_normalized",
    "packedattention_sizes_bias", "packedmultiheadattention_packed_qkv",
    "qorderedmatmul_bias_c", "quantizewithorder_row_to_col4_4r2_8c", "gemmfloat8_float_transb",
    "qorderedattention_mask", "qorderedlongformerattention",
    "sparseattention_decode_rotary", "longformerattention", "decoderattention_self_past",
]


def main():
    cli = sys.argv[1]
    shutil.rmtree(SEEDS, ignore_errors=True)
    for name, m in models():
        data = m.SerializeToString()
        write("onnx", name + ".onnx", data)  # for onnx_check, onnx_run and onnx_import
        path = os.path.join(SEEDS, "onnx", name + ".onnx")
        out = os.path.join(SEEDS, "project", name + ".dwproj")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run([cli, "import", path, "-o", out], check=True, stdout=subprocess.DEVNULL)
    # The golden cases of the ai.onnx operators after opset 17 (one node each, with its
    # attributes), and the com.microsoft ones listed above.
    root = os.path.join(HERE, "..", "golden", "ort-onnx")
    for case in sorted(os.listdir(root)):
        shutil.copy(os.path.join(root, case, "model.onnx"),
                    os.path.join(SEEDS, "onnx", f"newer_{case}.onnx"))
    contrib = os.path.join(HERE, "..", "golden", "ort-contrib")
    for case in MICROSOFT_SEEDS:
        shutil.copy(os.path.join(contrib, case, "model.onnx"),
                    os.path.join(SEEDS, "onnx", f"microsoft_{case}.onnx"))
    # The reference cases of the ops ONNX Runtime runs only on GPUs, one model per op.
    reference = os.path.join(HERE, "..", "golden", "ref-contrib")
    for case in REFERENCE_SEEDS:
        shutil.copy(os.path.join(reference, case, "model.onnx"),
                    os.path.join(SEEDS, "onnx", f"microsoft_{case}.onnx"))
    examples = os.path.join(HERE, "..", "..", "resources", "examples")
    for f in sorted(os.listdir(examples)):
        shutil.copy(os.path.join(examples, f), os.path.join(SEEDS, "project", f))

    # data_readers: selector byte (fuzz/targets.cpp), then the file.
    images = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    idx = struct.pack(">HBB", 0, 0x08, 3) + struct.pack(">3I", 2, 3, 3) + images.tobytes()
    write("data_readers", "images.idx", b"\x00" + idx)
    write("data_readers", "images.idx.gz", b"\x82" + gzip.compress(idx, mtime=0))
    write("data_readers", "labels.idx", b"\x00" + struct.pack(">HBBI", 0, 0x08, 1, 3) + b"\x00\x01\x02")
    csv = b"a,b,label\n1.5,2,0\n3,\"4\",1\n-1e3,0.25,2\n"
    write("data_readers", "header_label.csv", bytes([0x6A]) + csv)
    write("data_readers", "semicolon.csv", bytes([0x33]) + b"1;2;3\n4;5;6\n")
    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype=np.float32).reshape(2, 3))
    write("data_readers", "float.npy", b"\x02" + buf.getvalue())
    buf = io.BytesIO()
    np.save(buf, np.arange(4, dtype=">i8"))
    write("data_readers", "bigendian.npy", b"\x02" + buf.getvalue())
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "t")
    write("data_readers", "tensor.pb", b"\x03" + t.SerializeToString())
    seq = onnx.SequenceProto(name="s", elem_type=onnx.SequenceProto.TENSOR)
    seq.tensor_values.extend([t, t])
    write("data_readers", "sequence.pb", b"\x04" + seq.SerializeToString())

    # image: selector byte (bit 0: JPEG), then the file.
    for mode, sel in (("L", 0x00), ("RGB", 0x16), ("RGBA", 0x06), ("P", 0x02)):
        img = Image.fromarray(np.arange(5 * 4 * 3, dtype=np.uint8).reshape(5, 4, 3) * 4, "RGB")
        buf = io.BytesIO()
        img.convert(mode).save(buf, format="PNG")
        write("image", mode + ".png", bytes([sel]) + buf.getvalue())
    for mode, sel in (("L", 0x01), ("RGB", 0x17), ("CMYK", 0x07)):
        img = Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3), "RGB")
        buf = io.BytesIO()
        img.convert(mode).save(buf, format="JPEG", quality=80)
        write("image", mode + ".jpg", bytes([sel]) + buf.getvalue())
    buf = io.BytesIO()
    Image.fromarray(np.zeros((6, 6), np.uint8), "L").save(buf, format="JPEG", progressive=True)
    write("image", "progressive.jpg", b"\x01" + buf.getvalue())


if __name__ == "__main__":
    main()
