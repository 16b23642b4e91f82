"""A Horovod elastic training script with only its import changed (chorus.torch as hvd),
for test_elastic.py: linear regression on synthetic data with hvd.DistributedOptimizer
built once, hvd.elastic.TorchState with an ElasticSampler, committed every step.

    train_elastic.py LOG_DIR [EPOCHS] [STEP_SECONDS]

Appends to LOG_DIR/<CHORUS_ELASTIC_ID>.log the same events as the C++ example:
start <pid> / reset <size> <rank> / step <epoch> <commits> <samples> <size> <rank>
<params sum> / done <loss>."""

import os
import sys
import time

import torch

import chorus.torch as hvd

log_dir = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
step_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
log = open(os.path.join(log_dir, os.environ.get("CHORUS_ELASTIC_ID", "solo") + ".log"), "a",
           buffering=1)
log.write(f"start {os.getpid()}\n")
torch.set_num_threads(1)

generator = torch.Generator().manual_seed(0)
features = torch.randn(4000, 16, generator=generator)
truth = torch.randn(16, 1, generator=generator)
targets = features @ truth + 0.01 * torch.randn(4000, 1, generator=generator)
dataset = torch.utils.data.TensorDataset(features, targets)

hvd.init()
torch.manual_seed(1)
model = torch.nn.Linear(16, 1)
base_lr = 0.01
optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size(), momentum=0.5)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(dataset, batch_size=16, sampler=sampler)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)


def on_reset():
    for group in optimizer.param_groups:
        group["lr"] = base_lr * hvd.size()
    log.write(f"reset {hvd.size()} {hvd.rank()}\n")


state.register_reset_callbacks([on_reset])
log.write(f"reset {hvd.size()} {hvd.rank()}\n")


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, epochs):
        # Horovod's pattern: batch indices count within the sampler's current shard, which
        # a reset re-deals among the ranks.
        for state.batch, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if step_seconds:
                time.sleep(step_seconds)
            sampler.record_batch(state.batch, loader.batch_size)
            state.commit()
            total = sum(p.detach().double().sum().item() for p in model.parameters())
            log.write(f"step {state.epoch} {state._commits} {len(x)} {hvd.size()} {hvd.rank()} "
                      f"{total:.12g}\n")
        state.batch = 0
        sampler.set_epoch(state.epoch + 1)
        state.commit()
    return loss.item()


final = train(state)
log.write(f"done {final:.6g}\n")
