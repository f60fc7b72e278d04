#!/usr/bin/python3
"""PyTorch's side of bench/distributed/run: the CNN example (bench/train_torch.py's model) trained
for one epoch data-parallel with DistributedDataParallel over gloo, on P processes of T threads,
a global batch of B (B/P a process), Adam lr 1e-3, on the first N Fashion-MNIST samples. P = 1
trains in one process without DDP. Prints one JSON line: {"processes", "threads", "batch",
"samples", "seconds"} (the epoch's time, from a barrier to a barrier, after two warm-up steps).

Usage: ddp_torch.py P T B N
"""
import json
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from train_torch import DATA, model, read_idx  # noqa: E402


def worker(rank, P, T, B, N, port, out):
    torch.set_num_threads(T)
    if P > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=P)
    x = read_idx(DATA + "/train-images-idx3-ubyte.gz")[:N].astype(np.float32) / 255.0
    y = read_idx(DATA + "/train-labels-idx1-ubyte.gz")[:N].astype(np.int64)
    x = torch.from_numpy(x.reshape(-1, 1, 28, 28).copy())
    y = torch.from_numpy(y.copy())
    torch.manual_seed(0)
    net = model("cnn")
    if P > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    per = B // P
    order = torch.from_numpy(np.random.RandomState(0).permutation(N))

    def step(start):
        idx = order[start + rank * per: start + (rank + 1) * per]
        opt.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward()
        opt.step()

    for _ in range(2):
        step(0)
    if P > 1:
        dist.barrier()
    t = time.perf_counter()
    for start in range(0, N - B + 1, B):
        step(start)
    if P > 1:
        dist.barrier()
    seconds = time.perf_counter() - t
    if rank == 0:
        out.put(seconds)
    if P > 1:
        dist.destroy_process_group()


def main():
    P, T, B, N = (int(a) for a in sys.argv[1:5])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, P, T, B, N, port, out)) for r in range(P)]
    for p in procs:
        p.start()
    seconds = out.get()
    for p in procs:
        p.join()
    print(json.dumps({"processes": P, "threads": T, "batch": B, "samples": N,
                      "seconds": seconds}))


if __name__ == "__main__":
    main()
