#!/usr/bin/python3
"""Mutation fuzzing of `deepwire run` (issue 19): takes the ONNX backend test models, moves a
quarter of them to a newer opset (18 to 25), changes a few bytes of each (overwrite, bit flip,
insertion), runs the CLI on the result with the case's
inputs, and fails if any run dies of a signal or takes longer than the time limit. Every failing
model is kept under OUT_DIR to replay.

Usage: mutate_onnx.py DEEPWIRE RUNS SEED [OUT_DIR]
CTest runs a short fixed-seed pass (label fuzz); longer runs are the same command with more RUNS.
"""
import glob
import os
import random
import subprocess
import sys

import onnx

DATA = "/usr/share/libonnx-testdata/data/node"


def main():
    cli, runs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = sys.argv[4] if len(sys.argv) > 4 else "/tmp/deepwire-fuzz"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    cases = sorted(glob.glob(f"{DATA}/*/model.onnx"))
    if not cases:
        print(f"no ONNX backend test data under {DATA}")
        return 1
    inputs = {}
    failures = []
    for it in range(runs):
        path = rng.choice(cases)
        case = os.path.dirname(path)
        data = bytearray(open(path, "rb").read())
        if rng.random() < 0.25:
            # A newer opset: nodes are then judged by the versions libonnx 1.12 lacks
            # (nodes/schema_facts.inc), a path of its own.
            m = onnx.load_from_string(bytes(data))
            for o in m.opset_import:
                if o.domain in ("", "ai.onnx"):
                    o.version = rng.randint(18, 25)
            data = bytearray(m.SerializeToString())
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(data))
            r = rng.random()
            if r < 0.6:
                data[k] = rng.randrange(256)
            elif r < 0.8:
                data[k] ^= 1 << rng.randrange(8)
            else:
                data[k:k] = bytes([rng.randrange(256)])
        model = os.path.join(out, f"mutant{it % 4}.onnx")
        with open(model, "wb") as f:
            f.write(data)
        if case not in inputs:  # the unmutated model's input names, for its .pb files
            m = onnx.load(path)
            inits = {t.name for t in m.graph.initializer}
            names = [i.name for i in m.graph.input if i.name not in inits]
            inputs[case] = [(n, f"{case}/test_data_set_0/input_{i}.pb") for i, n in enumerate(names)
                            if os.path.exists(f"{case}/test_data_set_0/input_{i}.pb")]
        args = [cli, "run", model]
        for name, pb in inputs[case]:
            args += ["--input", f"{name}={pb}"]
        try:
            p = subprocess.run(args, capture_output=True, timeout=20)
            bad = p.returncode < 0 or p.returncode >= 128
            why = f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            bad, why = True, "timeout"
        if bad:
            keep = os.path.join(out, f"failure_{len(failures)}_{os.path.basename(case)}.onnx")
            with open(keep, "wb") as f:
                f.write(data)
            failures.append(f"{os.path.basename(case)}: {why} (kept as {keep})")
    print(f"{runs} mutated models, {len(failures)} crash(es) or hang(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
