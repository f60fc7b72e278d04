"""What bench/zoo/compare.py and bench/ops/compare.py share: their common options, where the two
runtimes' runners are, and running one of them."""
import argparse
import json
import os
import subprocess


def arguments():
    """The options both take; each script adds its own before parse_args()."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two runtimes")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round")
    return ap


class Runners:
    """build/bench/zoo_bench (deepwire) and bench/zoo/ort_run.js with the onnxruntime-node
    package that bench/zoo/prepare.sh installs."""

    def __init__(self, args):
        build = os.path.dirname(os.path.dirname(args.zoo))
        self.zoo_bench = os.path.join(build, "bench", "zoo_bench")
        self.ort_js = os.path.join(args.root, "bench", "zoo", "ort_run.js")
        self.ort_pkg = os.path.abspath(
            os.path.join(args.zoo, "ort", "node_modules", "onnxruntime-node"))
        # The environment as a user's: OpenMP's default waiting (spin a while, then sleep) is
        # what `deepwire run` gets, and ONNX Runtime's pool spins too. OMP_WAIT_POLICY=passive,
        # which the test scripts set for shared CI machines, doubles deepwire's batch-1 times.
        self.env = dict(os.environ)

    def run(self, cmd):
        """One runner's JSON line, or None and the last line of what it said."""
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        if p.returncode != 0:
            return None, (p.stderr or p.stdout).strip().splitlines()[-1:]
        return json.loads(p.stdout.strip().splitlines()[-1]), None
