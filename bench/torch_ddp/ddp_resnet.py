"""PyTorch DDP (gloo) on the job of examples/resnet_synthetic, for
bench/torch_ddp/compare_resnet.sh.

The same network (torchvision's resnet18: the C++ example builds that architecture, 11.7 M
parameters in 62 tensors), the same synthetic data (--samples random 3 x P x P images with
random labels of 1000 classes), per-worker batch --batch, SGD lr 0.1 momentum 0.9, cross
entropy, one intra-op thread per worker. Workers are started with torch.multiprocessing on
this host, rendezvous over a loopback TCP port. Prints one line: "ddp workers=N
images_per_s=X" (global images per second over the steps after --warmup-steps).
"""
import argparse
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
import torchvision


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=args.workers)
    torch.manual_seed(42)
    images = torch.randn(args.samples, 3, args.image_size, args.image_size)
    labels = torch.randint(0, 1000, (args.samples,))
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet18(num_classes=1000))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per_epoch = args.samples // (args.batch * args.workers)
    for step in range(args.warmup_steps + args.steps):
        if step == args.warmup_steps:
            dist.barrier()
            start = time.perf_counter()
        first = ((step % per_epoch) * args.workers + rank) * args.batch  # this worker's shard
        x, y = images[first:first + args.batch], labels[first:first + args.batch]
        opt.zero_grad(set_to_none=True)  # as chorus's C++ DistributedOptimizer::zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    seconds = time.perf_counter() - start
    rate = torch.tensor([args.steps * args.batch / seconds], dtype=torch.float64)
    dist.all_reduce(rate)  # sum of per-worker rates = global images/s
    if rank == 0:
        print("ddp workers=%d images_per_s=%.2f" % (args.workers, rate.item()), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if args.samples < args.batch * args.workers:
        p.error("--samples must hold one global batch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.workers, join=True)


if __name__ == "__main__":
    main()
