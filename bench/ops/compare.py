#!/usr/bin/python3
"""Alternates deepwire (build/bench/zoo_bench) and ONNX Runtime (bench/zoo/ort_run.js) on each
single-operator model of bench/ops/make_models.py; see bench/ops/run."""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import OPS  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--zoo", required=True)
ap.add_argument("--root", required=True)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=3, help="alternations of the two runtimes")
ap.add_argument("--runs", type=int, default=10, help="timed runs per round")
ap.add_argument("--ops", default=",".join(OPS))
args = ap.parse_args()

build = os.path.dirname(os.path.dirname(args.zoo))
zoo_bench = os.path.join(build, "bench", "zoo_bench")
ort_js = os.path.join(args.root, "bench", "zoo", "ort_run.js")
ort_pkg = os.path.abspath(os.path.join(args.zoo, "ort", "node_modules", "onnxruntime-node"))
ops_dir = os.path.join(args.zoo, "ops")
x = os.path.join(ops_dir, "x.npy")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr or p.stdout).strip().splitlines()[-1:]
    return json.loads(p.stdout.strip().splitlines()[-1]), None


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
