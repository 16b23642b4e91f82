#!/usr/bin/python3
"""Training throughput of one Python script on two backends, for compare_training.sh.

The job of examples/fashion_mnist, step for step: the tutorial CNN (Conv2d 32 3x3 relu ->
flatten -> Linear 128 relu -> Linear 10), the Fashion-MNIST IDX files of
dataset-fashion-mnist, batch 64 per worker from a shuffled shard, SGD (lr scaled by the
workers, --momentum 0 unless given, as the example's), one intra-op thread; each step reads
the loss and counts the correct predictions as the C++ example does.

  --backend chorus   chorus.torch (import chorus.torch as hvd), under chorusrun
  --lockstep-only    (chorus) no averaging: each worker steps on its own gradients and the
                     workers meet at hvd.barrier() once per step, exchanging no data: the
                     baseline "lock-2" of compare_training.sh
  --balance          (chorus) the global batch (64 x workers) split by each worker's speed
                     in the step before (chorus.torch.BatchBalancer), each worker's loss
                     scaled by its share: "bal-2" of compare_training.sh
  --backend ddp      PyTorch DistributedDataParallel (gloo), under chorusrun too: the rank
                     and size come from CHORUS_RANK / CHORUS_SIZE, the rendezvous from
                     MASTER_ADDR / MASTER_PORT

Rank 0 prints "backend=B workers=N samples_per_s=X": global samples per second over the
steps after --warmup-steps, averaged over the ranks (as the C++ example reports it).
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
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
        return self.fc2(F.relu(self.fc1(F.relu(self.conv(x)).flatten(1))))


class Chorus:
    def __init__(self, model, lr, momentum, lockstep_only=False, balance=False):
        import chorus.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        sgd = torch.optim.SGD(model.parameters(), lr=lr * self.size, momentum=momentum)
        self.model = model
        self.optimizer = sgd
        if not lockstep_only:
            self.optimizer = hvd.DistributedOptimizer(sgd,
                                                      named_parameters=model.named_parameters())
        self.lockstep_only = lockstep_only
        self.balancer = hvd.BatchBalancer() if balance else None

    def share(self, rows):  # -> this rank's [begin, end) of the step's rows, loss scale
        if self.balancer is None:
            return 0, rows, 1.0
        s = self.balancer.next(rows)
        return s.begin, s.end, s.loss_scale

    def computed(self, seconds):
        if self.balancer is not None:
            self.balancer.record(seconds)

    def after_step(self):
        if self.lockstep_only and self.size > 1:
            self.hvd.barrier()

    def mean(self, value):
        return self.hvd.allreduce(torch.tensor([value], dtype=torch.float64), name="rate").item()


class Ddp:
    def __init__(self, model, lr, momentum):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.size = int(os.environ["CHORUS_RANK"]), int(os.environ["CHORUS_SIZE"])
        dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
        self.model = nn.parallel.DistributedDataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr * self.size,
                                         momentum=momentum)

    def share(self, rows):
        return 0, rows, 1.0

    def computed(self, seconds):
        pass

    def after_step(self):
        pass

    def mean(self, value):
        t = torch.tensor([value], dtype=torch.float64)
        self.dist.all_reduce(t)
        return t.item() / self.size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["chorus", "ddp"], required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lockstep-only", action="store_true")
    p.add_argument("--balance", action="store_true")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    images = torch.from_numpy(read_idx(args.data + "/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(args.data + "/train-labels-idx1-ubyte.gz").copy())
    images = images.float().div_(255).unsqueeze(1)
    labels = labels.long()
    torch.manual_seed(1234)
    if args.lockstep_only and args.balance:
        p.error("--balance with --lockstep-only")
    if args.backend == "chorus":
        job = Chorus(Net(), args.lr, args.momentum, args.lockstep_only, args.balance)
    elif args.lockstep_only or args.balance:
        p.error("--lockstep-only and --balance are for --backend chorus")
    else:
        job = Ddp(Net(), args.lr, args.momentum)
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(1))
    rows = args.batch * job.size if args.balance else args.batch  # per step, for this rank
    if not args.balance:  # balanced: every rank walks the whole order, a global batch a step
        order = order[job.rank::job.size]
    batches = order.shape[0] // rows  # whole batches per epoch; then the order again
    start, timed = time.perf_counter(), 0
    for step in range(args.steps):
        if step == args.warmup_steps:
            start, timed = time.perf_counter(), 0
        first = (step % batches) * rows
        begin, end, loss_scale = job.share(rows)
        sel = order[first + begin:first + end]
        x, y = images.index_select(0, sel), labels.index_select(0, sel)
        job.optimizer.zero_grad(set_to_none=True)  # as the C++ optimizer's zero_grad()
        computing = time.perf_counter()
        logits = job.model(x)
        loss = F.cross_entropy(logits, y)
        (loss * loss_scale if loss_scale != 1.0 else loss).backward()
        job.computed(time.perf_counter() - computing)
        job.optimizer.step()
        job.after_step()
        loss.item()
        logits.argmax(1).eq(y).sum().item()
        timed += rows if args.balance else sel.shape[0] * job.size
    rate = job.mean(timed / (time.perf_counter() - start))
    if job.rank == 0:
        print("backend=%s workers=%d samples_per_s=%.1f loss=%.4f"
              % (args.backend, job.size, rate, loss.item()), flush=True)


if __name__ == "__main__":
    main()
