"""Writes bench/ops/run's single-operator models and their input into OUT_DIR.

Usage: /usr/bin/python3 bench/ops/make_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

X = [8, 64, 56, 56]
N = helper.make_node


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def i64(name, value):
    return const(name, value, np.int64)


# name: (nodes from "x" to "y", initializers). "y" is then summed to one value.
OPS = {
    "add_channel": ([N("Add", ["x", "b"], ["y"])], [const("b", np.linspace(-1, 1, 64).reshape(64, 1, 1))]),
    "mul_row": ([N("Mul", ["x", "b"], ["y"])], [const("b", np.linspace(0.5, 1.5, 56))]),
    "sub_scalar": ([N("Sub", ["x", "b"], ["y"])], [const("b", 0.25)]),
    "clip_tensor_bounds": ([N("Clip", ["x", "lo", "hi"], ["y"])], [const("lo", 0.0), const("hi", 6.0)]),
    "sigmoid": ([N("Sigmoid", ["x"], ["y"])], []),
    "tanh": ([N("Tanh", ["x"], ["y"])], []),
    "erf": ([N("Erf", ["x"], ["y"])], []),
    "gelu_erf_ops": ([N("Div", ["x", "s2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["f"]),
                      N("Mul", ["x", "f"], ["g"]), N("Mul", ["g", "half"], ["y"])],
                     [const("s2", 1.4142135), const("one", 1.0), const("half", 0.5)]),
    "pow_square": ([N("Pow", ["x", "two"], ["y"])], [const("two", 2.0)]),
    "pow_fraction": ([N("Abs", ["x"], ["a"]), N("Pow", ["a", "e"], ["y"])], [const("e", 1.5)]),
    "where_mask": ([N("Greater", ["x", "z"], ["m"]), N("Where", ["m", "x", "z"], ["y"])], [const("z", 0.0)]),
    "sin": ([N("Sin", ["x"], ["y"])], []),
    "cast_int64": ([N("Cast", ["x"], ["c"], to=TensorProto.INT64), N("Cast", ["c"], ["y"], to=TensorProto.FLOAT)], []),
    "reduce_mean_channels": ([N("ReduceMean", ["x"], ["y"], axes=[1], keepdims=1)], []),
    "reduce_sum_spatial": ([N("ReduceSum", ["x", "ax"], ["y"], keepdims=1)], [i64("ax", [2, 3])]),
    "reduce_max_last": ([N("ReduceMax", ["x"], ["y"], axes=[3], keepdims=0)], []),
    "softmax_last": ([N("Softmax", ["x"], ["y"], axis=-1)], []),
    "layer_norm": ([N("LayerNormalization", ["x", "g", "bb"], ["y"], axis=-1)], [const("g", np.ones(56)), const("bb", np.zeros(56))]),
    "resize_nearest_2x": ([N("Resize", ["x", "", "sc"], ["y"], mode="nearest")], [const("sc", [1, 1, 2, 2])]),
    "resize_linear_2x": ([N("Resize", ["x", "", "sc"], ["y"], mode="linear")], [const("sc", [1, 1, 2, 2])]),
    "resize_align_corners": ([N("Resize", ["x", "", "sc"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")], [const("sc", [1, 1, 2, 2])]),
    "topk_last": ([N("TopK", ["x", "k"], ["y", "i"], axis=3)], [i64("k", [5])]),
    "transpose_nhwc": ([N("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], []),
    "concat_channels": ([N("Concat", ["x", "x"], ["y"], axis=1)], []),
    "slice_crop": ([N("Slice", ["x", "s", "e", "ax"], ["y"])], [i64("s", [4, 4]), i64("e", [52, 52]), i64("ax", [2, 3])]),
    "pad_reflect": ([N("Pad", ["x", "p"], ["y"], mode="reflect")], [i64("p", [0, 0, 2, 2, 0, 0, 2, 2])]),
    "avg_pool_3x3": ([N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], []),
    "instance_norm": ([N("InstanceNormalization", ["x", "sc", "b"], ["y"])], [const("sc", np.ones(64)), const("b", np.zeros(64))]),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "ops"
    os.makedirs(out, exist_ok=True)
    x_path = os.path.join(out, "x.npy")
    if not os.path.exists(x_path):
        np.save(x_path, np.random.default_rng(0).standard_normal(X).astype(np.float32))
    for name, (nodes, inits) in OPS.items():
        path = os.path.join(out, name + ".onnx")
        if os.path.exists(path):
            continue
        # The sum of squares: positive and large, so that the two runtimes' totals can be
        # compared relatively (a normalization's plain sum is zero up to rounding).
        tail = N("ReduceSumSquare", ["y"], ["total"], keepdims=0)
        graph = helper.make_graph(
            nodes + [tail], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, X)],
            [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, path)


if __name__ == "__main__":
    main()
