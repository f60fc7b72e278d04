"""Runs bench/distributed/run's measurements: one process against P under mpirun, alternating."""
import argparse
import json
import os
import statistics
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--cli", required=True)
ap.add_argument("--project", required=True)
ap.add_argument("--processes", type=int, default=2)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--samples", type=int, default=10000)
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()

per = max(1, args.threads // args.processes)
train = [args.cli, "train", args.project, "--epochs", "1", "--train-limit", str(args.samples),
         "--batch-size", "64", "--quiet", "--json"]
mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.processes),
          "--bind-to", "none", "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include",
          "lo", "--mca", "oob_tcp_if_include", "lo"]
env = dict(os.environ, OMP_WAIT_POLICY="passive")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit("failed: " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
    epoch = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][-1]
    return (epoch["seconds"], epoch.get("waited_seconds", 0.0), epoch.get("sum_wait_seconds", 0.0),
            epoch.get("skew_wait_seconds", 0.0))


one, overlapped, after = [], [], []
for _ in range(args.rounds):
    one.append(run(train + ["--threads", str(args.threads)]))
    overlapped.append(run(mpirun + train + ["--threads", str(per), "--distributed"]))
    after.append(run(mpirun + train + ["--threads", str(per), "--distributed", "--no-overlap"]))
med = lambda runs, i: statistics.median(r[i] for r in runs)
print(f"CNN, {args.samples} samples, batch 64, {args.threads} threads in all (median of "
      f"{args.rounds} rounds, alternating)")
print(f"  1 process x {args.threads} threads:      {med(one, 0):6.2f} s per epoch")
for name, runs in (("overlapped sums", overlapped), ("sums after backward", after)):
    print(f"  {args.processes} processes x {per} threads, {name}: {med(runs, 0):6.2f} s per epoch, "
          f"rank 0 waited {med(runs, 1):.3f} s: {med(runs, 3):.3f} s for a slower process's "
          f"backward pass, {med(runs, 2):.3f} s for the sums after it")
# The sums' own cost: the wait after the last process's backward pass ended. What is left of
# the wait is the processes' skew, which no overlap can hide.
sums_after, sums_overlap = med(after, 2), med(overlapped, 2)
hidden = 1 - sums_overlap / sums_after if sums_after > 0 else 0.0
print(f"  the overlap hid {100 * hidden:.0f}% of the sums' wait (target: 80%)")
