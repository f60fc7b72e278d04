#!/usr/bin/python3
"""Alternates deepwire (build/bench/zoo_bench) and ONNX Runtime (bench/zoo/ort_run.js) on each
zoo model; see bench/zoo/run, which prepares what this needs."""
import json
import math
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runtimes  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "efficientnet_b0", "transformer", "lstm"]

ap = runtimes.arguments()
ap.add_argument("--models", default=",".join(MODELS))
ap.add_argument("--batches", default="1,8")
args = ap.parse_args()
runners = runtimes.Runners(args)
zoo_bench, ort_js, ort_pkg, run = runners.zoo_bench, runners.ort_js, runners.ort_pkg, runners.run


def agrees(out, ref):
    y, t = np.load(out), np.load(ref)
    if y.shape != t.shape:
        return False, f"shape {y.shape} vs torch {t.shape}"
    # An output far below the absolute tolerance would pass whatever the runtime computed.
    if np.abs(t).max() < 1e-2:
        return False, f"torch's output is too small to check against ({np.abs(t).max():.1e})"
    err = np.abs(y - t) - (1e-4 + 1e-3 * np.abs(t))
    return bool((err <= 0).all()), f"max |diff| {np.abs(y - t).max():.2e}"


# `--models wide`: the wider set make_models.py exports on request.
names = args.models.split(",")
if names == ["wide"]:
    from make_models import WIDE  # noqa: E402 (torch: only when asked)
    names = WIDE
rows = []
for name in names:
    for b in args.batches.split(","):
        stem = os.path.join(args.zoo, "models", f"{name}_b{b}")
        model, x, ref = stem + ".onnx", stem + ".input.npy", stem + ".torch.npy"
        times = {"deepwire": [], "ort": []}
        notes = []
        for r in range(args.rounds):
            first = r == 0
            dw, err = run([zoo_bench, model, x, "--threads", str(args.threads), "--runs",
                           str(args.runs), "--warmup", "3"] +
                          (["--out", stem + ".deepwire.npy"] if first else []))
            if dw is None:
                notes.append(f"deepwire failed: {err}")
                break
            times["deepwire"] += dw["runs_ms"]
            ort, err = run(["node", ort_js, ort_pkg, model, x, str(args.threads), str(args.runs),
                            "3"] + ([stem + ".ort.npy"] if first else []))
            if ort is None:
                notes.append(f"onnxruntime failed: {err}")
                break
            times["ort"] += ort["runs_ms"]
        row = {"model": name, "batch": int(b)}
        if times["deepwire"] and times["ort"]:
            row["deepwire_ms"] = statistics.median(times["deepwire"])
            row["ort_ms"] = statistics.median(times["ort"])
            row["ratio"] = row["deepwire_ms"] / row["ort_ms"]
            for who in ("deepwire", "ort"):
                ok, how = agrees(f"{stem}.{who}.npy", ref)
                row[f"{who}_matches_torch"] = ok
                if not ok:
                    notes.append(f"{who} differs from torch: {how}")
        row["notes"] = notes
        rows.append(row)
        print(f"{name:16s} b{b}: " + (f"deepwire {row['deepwire_ms']:9.2f} ms  onnxruntime "
                                     f"{row['ort_ms']:9.2f} ms  ratio {row['ratio']:5.2f}"
                                     if "ratio" in row else "no timing") +
              ("" if not notes else "  [" + "; ".join(map(str, notes)) + "]"), flush=True)

ratios = [r["ratio"] for r in rows if "ratio" in r]
if ratios:
    geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
    print(f"geometric mean of deepwire / onnxruntime over {len(ratios)} pairs: {geo:.2f} "
          f"(threads {args.threads}; above 1: deepwire slower)")
json.dump(rows, open(os.path.join(args.zoo, "last_run.json"), "w"), indent=1)
bad = [r for r in rows if r["notes"]]
sys.exit(1 if bad else 0)
