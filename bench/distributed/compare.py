"""Runs bench/distributed/run's measurements: one process against P under mpirun, alternating;
with --torch, PyTorch's DistributedDataParallel (gloo) on the same model, data and batch, in the
same rounds (ddp_torch.py), for the scaling beside deepwire's."""
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
ap.add_argument("--batch-size", type=int, default=64, help="the global batch")
ap.add_argument("--torch", action="store_true", help="PyTorch DDP (gloo) alongside")
args = ap.parse_args()

per = max(1, args.threads // args.processes)
train = [args.cli, "train", args.project, "--epochs", "1", "--train-limit", str(args.samples),
         "--batch-size", str(args.batch_size), "--quiet", "--json"]
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


def torch_run(processes, threads):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_torch.py")
    cmd = ["/usr/bin/python3", script, str(processes), str(threads), str(args.batch_size),
           str(args.samples)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("failed: " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])["seconds"]


one, overlapped, after, torch_one, torch_ddp = [], [], [], [], []
for _ in range(args.rounds):
    one.append(run(train + ["--threads", str(args.threads)]))
    overlapped.append(run(mpirun + train + ["--threads", str(per), "--distributed"]))
    after.append(run(mpirun + train + ["--threads", str(per), "--distributed", "--no-overlap"]))
    if args.torch:
        torch_one.append(torch_run(1, args.threads))
        torch_ddp.append(torch_run(args.processes, per))
med = lambda runs, i: statistics.median(r[i] for r in runs)
print(f"CNN, {args.samples} samples, global batch {args.batch_size}, {args.threads} threads in "
      f"all (median of {args.rounds} rounds, alternating)")
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
print(f"  deepwire: {args.processes} processes take {med(overlapped, 0) / med(one, 0):.2f}x the "
      f"time of 1 process with all the threads")
if args.torch:
    t1, tp = statistics.median(torch_one), statistics.median(torch_ddp)
    print(f"  PyTorch DDP (gloo): 1 process x {args.threads} "
          f"threads {t1:6.2f} s, {args.processes} x {per} {tp:6.2f} s: {tp / t1:.2f}x; deepwire "
          f"against PyTorch: {med(one, 0) / t1:.2f}x (1 process), "
          f"{med(overlapped, 0) / tp:.2f}x ({args.processes} processes)")
