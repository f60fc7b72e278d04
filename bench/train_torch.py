#!/usr/bin/python3
"""PyTorch side of bench/train_bench.cpp: the same Fashion-MNIST MLP / CNN as the examples
(resources/examples/fashion_mnist_{mlp,cnn}.dwproj), Adam lr 1e-3, batch 64, shuffled batches,
a fixed number of CPU threads. Times STEPS training steps after a warm-up and prints one JSON
line: {"model", "threads", "steps", "seconds_per_step", "seconds_per_epoch", "peak_rss_mib"}.

Run with /usr/bin/python3 (Debian python3-torch).
Usage: train_torch.py mlp|cnn STEPS THREADS [fp32|bf16|tf32 [cpu|cuda [BATCH]]]
       train_torch.py mlp|cnn serve THREADS [fp32|bf16|tf32 [cpu|cuda [BATCH]]]
cuda: the model and optimizer on the GPU, each batch copied up as it is drawn (as deepwire does);
TF32 stays off, as in deepwire, so both compute full fp32 products, except under tf32, which turns
it on for convolutions and matrix products (deepwire's precision tf32).
serve: after the warm-up prints "ready", then for every line N read from stdin times N more steps
and prints their seconds, one line each; at the end of stdin prints the JSON line (steps and
seconds_per_step over every timed step). train_bench.cpp drives this to alternate short runs of
both sides, so that both see the same phases of a machine whose speed drifts.
bf16 runs forward and loss under torch.autocast(device, bfloat16), PyTorch's counterpart of
deepwire's precision bf16 (weights, gradients and the optimizer stay float32).
"""
import contextlib
import gzip
import json
import resource
import sys
import time

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def model(kind):
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def peak_rss_mib():
    """This process's own peak RSS. getrusage's ru_maxrss would include the memory of a parent
    that forked it (train_bench), which Linux carries across exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    kind, threads = sys.argv[1], int(sys.argv[3])
    serve = sys.argv[2] == "serve"
    steps = 0 if serve else int(sys.argv[2])
    precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
    bf16 = precision == "bf16"
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 64
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.benchmark = True
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    images = read_idx(f"{DATA}/train-images-idx3-ubyte.gz")
    labels = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz")
    x = torch.tensor(((images.astype(np.float32) / 255.0) - 0.2860) / 0.3530).reshape(-1, 1, 28, 28)
    y = torch.tensor(labels.astype(np.int64))
    n = x.shape[0]
    net = model(kind).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    order = torch.randperm(n)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(i):
        idx = order[(i * batch) % (n - batch):(i * batch) % (n - batch) + batch]
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            loss = loss_fn(net(x[idx].to(device)), y[idx].to(device))
        loss.backward()
        opt.step()

    for i in range(5):
        step(i)
    done, seconds = 5, 0.0

    def timed(count):
        nonlocal done
        start = time.perf_counter()
        for i in range(count):
            step(done + i)
        if device == "cuda":
            torch.cuda.synchronize()
        done += count
        return time.perf_counter() - start

    if serve:
        print("ready", flush=True)
        for line in sys.stdin:
            t = timed(int(line))
            seconds += t
            print(t, flush=True)
        steps = done - 5
    else:
        seconds = timed(steps)
    per_step = seconds / max(steps, 1)
    steps_per_epoch = (n + batch - 1) // batch
    print(json.dumps({"model": kind, "threads": threads, "steps": steps,
                      "precision": precision,
                      "seconds_per_step": per_step,
                      "seconds_per_epoch": per_step * steps_per_epoch,
                      "peak_rss_mib": peak_rss_mib(),
                      "peak_gpu_mib": (torch.cuda.max_memory_allocated() / 2**20
                                       if device == "cuda" else 0)}))


if __name__ == "__main__":
    main()
