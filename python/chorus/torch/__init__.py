"""chorus.torch: Horovod's PyTorch API over chorus's engine.

An existing Horovod program runs on chorus with one changed line::

    import chorus.torch as hvd      # was: import horovod.torch as hvd

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

and is started with ``chorusrun -np 4 python3 train.py``. See docs/python.md.
"""

import torch  # before _ops: the extension uses torch's Python types

from chorus.torch import _ops
from chorus.torch._ops import BatchBalancer, BatchShare  # chorus's own: docs/torch.md
from chorus.torch.compression import Compression
from chorus.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                    broadcast_parameters)
from chorus.torch.ops import (Adasum, Average, CollectiveTimeout, HorovodInternalError, Max, Min,
                              MismatchError, PeerError, Product, Sum, allgather, allgather_async,
                              allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                              alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                              broadcast_async_, ccl_built, cross_rank, cross_size, cuda_built,
                              ddl_built, gloo_built, gloo_enabled, grouped_allgather,
                              grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                              grouped_allreduce_async, grouped_allreduce_async_,
                              grouped_reducescatter, grouped_reducescatter_async, init,
                              is_homogeneous, is_initialized, join, local_rank, local_size,
                              mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll,
                              rank, reducescatter, reducescatter_async, rocm_built, shutdown, size,
                              sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from chorus.torch.optimizer import DistributedOptimizer
from chorus.torch.process_sets import (ProcessSet, add_process_set, global_process_set,
                                       remove_process_set)
from chorus.torch.sync_batch_norm import SyncBatchNorm
from chorus.torch import elastic  # noqa: E402  (hvd.elastic: uses the names above)
