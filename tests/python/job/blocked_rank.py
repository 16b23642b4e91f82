"""A 2-rank job whose rank 1 waits in an allreduce that rank 0 never submits, for
test_interrupt.py. Each rank writes its pid to $PID_DIR/<rank> once it is where the test
wants it: rank 0 sleeping in Python, rank 1 inside hvd.allreduce."""

import os
import sys
import threading
import time

import torch

import chorus.torch as hvd

hvd.init()
pid_file = os.path.join(os.environ["PID_DIR"], str(hvd.rank()))
if hvd.rank() == 0:
    open(pid_file, "w").write(str(os.getpid()))
    time.sleep(600)
    sys.exit(0)
threading.Timer(0.5, lambda: open(pid_file, "w").write(str(os.getpid()))).start()
try:
    hvd.allreduce(torch.ones(4), name="never")
except KeyboardInterrupt:
    print("rank 1: KeyboardInterrupt while waiting in allreduce", flush=True)
    raise
