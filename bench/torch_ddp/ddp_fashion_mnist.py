#!/usr/bin/python3
"""PyTorch DDP (gloo) on the same job as examples/fashion_mnist, for bench/torch_ddp/compare_training.sh.

Same model (Conv2d 32 3x3 relu -> flatten -> Linear 128 relu -> Linear 10), same data (the
Fashion-MNIST IDX files of dataset-fashion-mnist, read here with gzip + numpy), per-worker
batch 64, SGD, one intra-op thread per worker. Workers are started with
torch.multiprocessing on this host, rendezvous over a loopback TCP port.
Prints one line: "ddp workers=N samples_per_s=X" (global samples per second over the timed
steps, i.e. after --warmup-steps).
"""
import argparse
import gzip
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    if not os.path.exists(path):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3)
        self.fc1 = nn.Linear(32 * 26 * 26, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv(x)).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    images = torch.from_numpy(read_idx(args.data + "/train-images-idx3-ubyte").copy())
    labels = torch.from_numpy(read_idx(args.data + "/train-labels-idx1-ubyte").copy())
    images = images.float().div_(255).unsqueeze(1)
    labels = labels.long()
    torch.manual_seed(1234)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * args.workers)
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(images.shape[0]), num_replicas=args.workers, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(1)
    order = torch.tensor(list(iter(sampler)))
    start = time.perf_counter()
    for step in range(args.steps):
        if step == args.warmup_steps:
            dist.barrier()
            start = time.perf_counter()
        sel = order[step * args.batch:(step + 1) * args.batch]
        x, y = images.index_select(0, sel), labels.index_select(0, sel)
        opt.zero_grad(set_to_none=True)  # as chorus's C++ DistributedOptimizer::zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    seconds = time.perf_counter() - start
    rate = torch.tensor([(args.steps - args.warmup_steps) * args.batch / seconds], dtype=torch.float64)
    dist.all_reduce(rate)  # sum of per-worker rates = global samples/s
    if rank == 0:
        print(f"ddp workers={args.workers} samples_per_s={rate.item():.1f} loss={loss.item():.4f}",
              flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.workers, join=True)


if __name__ == "__main__":
    main()
