#!/usr/bin/python3
"""Alternates deepwire (build/bench/zoo_bench) and ONNX Runtime (bench/zoo/ort_run.js) on each
single-operator model of bench/ops/make_models.py; see bench/ops/run."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import OPS  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "zoo"))
import runtimes  # noqa: E402

ap = runtimes.arguments()
ap.add_argument("--ops", default=",".join(OPS))
args = ap.parse_args()
runners = runtimes.Runners(args)
zoo_bench, ort_js, ort_pkg, run = runners.zoo_bench, runners.ort_js, runners.ort_pkg, runners.run
ops_dir = os.path.join(args.zoo, "ops")
x = os.path.join(ops_dir, "x.npy")

ratios, failed = [], 0
print(f"{'op':24s} {'deepwire':>10s} {'onnxruntime':>12s} {'ratio':>6s}  (best ms per run, "
      f"{args.threads} threads)")
for name in args.ops.split(","):
    model = os.path.join(ops_dir, name + ".onnx")
    best = {"deepwire": math.inf, "ort": math.inf}
    outs = {"deepwire": os.path.join(ops_dir, name + ".dw.npy"),
            "ort": os.path.join(ops_dir, name + ".ort.npy")}
    error = None
    for r in range(args.rounds):
        out_dw = ["--out", outs["deepwire"]] if r == 0 else []
        d, err = run([zoo_bench, model, x, "--threads", str(args.threads), "--runs",
                      str(args.runs), "--warmup", "2"] + out_dw)
        o, err2 = run(["node", ort_js, ort_pkg, model, x, str(args.threads), str(args.runs), "2"]
                      + ([outs["ort"]] if r == 0 else []))
        if d is None or o is None:
            error = err or err2
            break
        best["deepwire"] = min(best["deepwire"], min(d["runs_ms"]))
        best["ort"] = min(best["ort"], min(o["runs_ms"]))
    if error:
        failed += 1
        print(f"{name:24s} failed: {error}")
        continue
    a, b = float(np.load(outs["deepwire"])), float(np.load(outs["ort"]))
    # The totals are float32 sums of 1.6M squares: ONNX Runtime's is off by up to 1.5e-4 of the
    # float64 value (deepwire's by 1e-7 on concat_channels), hence the tolerance.
    agree = abs(a - b) <= 1e-3 * abs(b) + 1e-3
    ratio = best["deepwire"] / best["ort"]
    ratios.append(ratio)
    print(f"{name:24s} {best['deepwire']:10.3f} {best['ort']:12.3f} {ratio:6.2f}"
          + ("" if agree else f"  OUTPUTS DIFFER: {a:.6g} vs {b:.6g}"))
    failed += 0 if agree else 1
if ratios:
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean of deepwire / onnxruntime over {len(ratios)} ops: {geo:.2f}")
sys.exit(1 if failed else 0)
