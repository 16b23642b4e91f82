"""The job as chorusrun started it, re-initialisation, what was built."""

import ctypes
import os

import pytest
import torch

import chorus.torch as hvd


def test_ranks_match_the_launcher():
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        assert getattr(hvd, name)() == int(os.environ["HOROVOD_" + name.upper()]), name
    assert hvd.is_homogeneous()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert hvd.global_process_set.size() == hvd.size()


def test_init_is_idempotent_and_reinit_works():
    hvd.init()  # already initialised: nothing happens
    before = (hvd.rank(), hvd.size())
    for _ in range(3):
        hvd.shutdown()
        assert not hvd.is_initialized()
        hvd.init()
        assert (hvd.rank(), hvd.size()) == before
        assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def test_init_tunes_glibc_malloc_for_training():
    """hvd.init (chorus::init) keeps freed memory at the top of the heap up to 256 MiB
    (docs/torch.md). glibc's own trim threshold never exceeds 64 MiB, and its blocks of 4 MiB
    are mmap()ed unless a free raised its threshold: either way 96 MiB freed would not stay."""
    if os.environ.get("CHORUS_MALLOC_TUNING") == "0" or os.environ.get("LD_PRELOAD"):
        pytest.skip("the user's choice wins (tests/util/malloc_tuning_test.cc)")
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = _Mallinfo2
    blocks = [libc.malloc(4 << 20) for _ in range(24)]
    assert all(blocks)
    for b in reversed(blocks):
        libc.free(b)
    assert libc.mallinfo2().keepcost >= 80 << 20


def test_what_was_built_is_answered_truthfully():
    # Built with libopenmpi-dev (scripts/setup); this job runs over chorus's own transports.
    assert hvd.mpi_built() and not hvd.mpi_enabled()
    with pytest.raises(ValueError, match="mpi_enabled.. is False"):
        hvd.mpi_threads_supported()
    assert not hvd.gloo_built() and not hvd.gloo_enabled()
    assert hvd.nccl_built() == 0
    assert not (hvd.ccl_built() or hvd.ddl_built() or hvd.cuda_built() or hvd.rocm_built())


def test_timeline(tmp_path):
    path = tmp_path / ("timeline.%d.json" % hvd.rank())
    hvd.start_timeline(str(path))
    hvd.allreduce(torch.ones(3), name="timeline_op")
    hvd.stop_timeline()
    text = path.read_text()
    assert "timeline_op" in text and "ALLREDUCE" in text


def test_compression_round_trip():
    for dtype in (torch.float32, torch.float64):
        t = torch.ones(5, dtype=dtype)
        c, ctx = hvd.Compression.fp16.compress(t)
        assert c.dtype == torch.float16
        assert hvd.Compression.fp16.decompress(c, ctx).dtype == dtype
    i = torch.ones(5, dtype=torch.int32)
    c, ctx = hvd.Compression.fp16.compress(i)
    assert c.dtype == torch.int32
