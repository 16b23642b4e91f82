"""chorus: distributed training with a ring allreduce over its own shared-memory and TCP
transports. ``import chorus.torch as hvd`` gives Horovod's PyTorch API (docs/python.md)."""

__version__ = "0.1.0"
