#!/usr/bin/env python3
"""deepwire's accelerator cuda against PyTorch eager on the same GPU, on the zoo's models
(bench/zoo/make_models.py: torchvision's resnet18, mobilenet_v2 and efficientnet_b0 with random
weights, a transformer encoder, an LSTM) at batch 1 and 64, alternating the two, each timed host to
host (the input starts as a numpy array and the output ends as one, as `deepwire run` works).
PyTorch runs twice: with its defaults, where cuDNN convolutions may use TF32, and in strict fp32
(torch.backends.cudnn.allow_tf32 = False). deepwire runs twice too: in fp32 (strict, compared with
strict PyTorch) and with --precision tf32 (TF32 convolutions and matrix products, compared with
PyTorch's defaults). Every answer is checked against strict-fp32 PyTorch: fp32 within 1e-3, tf32
within 2e-2 (relative to the output's largest magnitude).

Runs on the GPU machine with its own python3 (CUDA PyTorch and torchvision); bench/gpu_checks.sh
calls it:  python3 bench/zoo/gpu_compare.py BUILD_DIR OUT_DIR [--rounds R] [--runs K]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from make_models import calibrate, models

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("out")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--runs", type=int, default=20)
ap.add_argument("--models", default="resnet18,mobilenet_v2,efficientnet_b0,transformer")
ap.add_argument("--batches", default="1,64")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
zoo_bench = os.path.join(args.build, "bench", "zoo_bench")
torch.manual_seed(0)
dev = torch.device("cuda")


ZOO = {}
for name, model, make_input in models():
    calibrate(model, make_input)
    ZOO[name] = (model, make_input)


def export(name, batch):
    path = os.path.join(args.out, f"{name}_b{batch}")
    model, make_input = ZOO[name]
    model = model.cpu().eval()  # exported on the cpu; timed on the GPU
    x = make_input(batch)
    kw = dict(opset_version=17, input_names=["input"], output_names=["output"],
              do_constant_folding=True)
    try:
        torch.onnx.export(model, (x,), path + ".onnx", dynamo=False, **kw)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, (x,), path + ".onnx", **kw)
    np.save(path + ".input.npy", x.numpy())
    return path, model.to(dev)


def torch_times(model, x, runs, tf32):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    times, y = [], None
    with torch.no_grad():
        for r in range(3 + runs):
            t = time.perf_counter()
            y = model(torch.from_numpy(x).to(dev)).cpu().numpy()
            ms = (time.perf_counter() - t) * 1e3
            if r >= 3:
                times.append(ms)
    return times, y


rows = []
for name in args.models.split(","):
    for b in map(int, args.batches.split(",")):
        stem, model = export(name, b)
        x = np.load(stem + ".input.npy")
        t = {"deepwire": [], "deepwire_tf32": [], "torch": [], "torch_fp32": []}
        off, err, ref, note = [], None, None, ""
        for r in range(args.rounds):
            for precision in ("fp32", "tf32"):
                cmd = [zoo_bench, stem + ".onnx", stem + ".input.npy", "--accelerator", "cuda",
                       "--precision", precision, "--runs", str(args.runs), "--warmup", "3"]
                if r == 0:
                    cmd += ["--out", f"{stem}.deepwire_{precision}.npy"]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    err = (p.stderr or p.stdout).strip().splitlines()[-1:]
                    break
                res = json.loads(p.stdout.strip().splitlines()[-1])
                t["deepwire" if precision == "fp32" else "deepwire_tf32"] += res["runs_ms"]
                off = res.get("off_accelerator", [])
            if err:
                break
            tt, _ = torch_times(model, x, args.runs, True)
            t["torch"] += tt
            tt, y = torch_times(model, x, args.runs, False)
            t["torch_fp32"] += tt
            if ref is None:
                ref = y
        row = {"model": name, "batch": b, "off_accelerator": off}
        if err:
            row["error"] = err
        else:
            for k, v in t.items():
                row[k + "_ms"] = statistics.median(v)
            row["ratio"] = row["deepwire_ms"] / row["torch_ms"]
            row["ratio_fp32"] = row["deepwire_ms"] / row["torch_fp32_ms"]
            row["ratio_tf32"] = row["deepwire_tf32_ms"] / row["torch_ms"]
            got = np.load(stem + ".deepwire_fp32.npy")
            diff = float(np.abs(got - ref).max())
            row["max_diff_vs_torch_fp32"] = diff
            got32 = np.load(stem + ".deepwire_tf32.npy")
            scale = float(np.abs(ref).max()) or 1.0
            row["max_diff_tf32_vs_torch_fp32"] = float(np.abs(got32 - ref).max())
            row["matches"] = bool((np.abs(got - ref) <= 1e-3 + 1e-3 * np.abs(ref)).all()) and \
                row["max_diff_tf32_vs_torch_fp32"] <= 2e-2 * scale
        rows.append(row)
        if "ratio" in row:
            print(f"{name:13s} b{b:<3d} deepwire fp32 {row['deepwire_ms']:7.2f} ms, tf32 "
                  f"{row['deepwire_tf32_ms']:7.2f}  torch {row['torch_ms']:7.2f} ms (strict fp32 "
                  f"{row['torch_fp32_ms']:7.2f})  fp32/strict {row['ratio_fp32']:.2f}  "
                  f"tf32/torch {row['ratio_tf32']:.2f}  max |diff| fp32 "
                  f"{row['max_diff_vs_torch_fp32']:.1e} tf32 "
                  f"{row['max_diff_tf32_vs_torch_fp32']:.1e}"
                  f"{'' if row['matches'] else ' MISMATCH'}"
                  f"{'  off cuda: ' + ', '.join(off) if off else ''}", flush=True)
        else:
            print(f"{name:13s} b{b:<3d} deepwire failed: {err}", flush=True)
json.dump(rows, open(os.path.join(args.out, "gpu_zoo.json"), "w"), indent=1)
sys.exit(0 if all(r.get("matches") for r in rows) else 1)
