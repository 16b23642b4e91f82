"""Process sets: subsets of the ranks that run collectives among themselves.

As in Horovod: ``hvd.add_process_set([0, 2])`` (called by every rank, in the same order)
returns a ProcessSet, and ``process_set=`` on any collective limits it to those ranks.
Ranks given to collectives (a broadcast's root) stay ranks of the whole job; the results
of an allgather come in the order of ``ProcessSet.ranks``. Each set has its own engine
and connections in chorus (C++ ``Engine::add_process_set``), so collectives of different
sets never wait for one another.
"""

import numbers

from chorus.torch import _ops


class ProcessSet:
    """A set of ranks, registered with ``init(process_sets=...)`` or ``add_process_set``.

    ``process_set_id`` is None until the set is registered (and after it is removed).
    """

    process_set_id = None
    ranks = None

    def __init__(self, ranks):
        try:
            ranks = sorted(ranks)
        except TypeError:
            raise ValueError("ProcessSet takes a list of ranks (integers), not %r" % (ranks,))
        if any(not isinstance(r, numbers.Integral) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet takes a list of ranks (integers), got %r" % (ranks,))
        self.ranks = [int(r) for r in ranks]

    def size(self):
        """The number of ranks in the set, or None when it is not registered."""
        if self.process_set_id is None:
            return None
        return _ops.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set (its index in ``ranks``), or None when the set
        is not registered. ValueError when this process is not a member."""
        if self.process_set_id is None:
            return None
        return _ops.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is a member, or None when the ranks are not known yet."""
        if self.ranks is None:
            return None
        return _ops.rank() in self.ranks

    def _invalidate(self):
        self.process_set_id = None

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __repr__ = __str__


# Every rank: id 0. Its ranks are filled in by init().
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _register_after_init(process_sets):
    """Gives the ProcessSet objects passed to init() their ids (init registered their ranks)."""
    table = _ops.process_set_table()
    global_process_set.ranks = list(table[0])
    ids = {tuple(ranks): set_id for set_id, ranks in table.items()}
    seen = {0}
    for ps in process_sets:
        ps.process_set_id = ids.get(tuple(ps.ranks))
        if ps.process_set_id in seen:  # a second object with the same ranks
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)


def add_process_set(process_set):
    """Registers a new process set (a ProcessSet or a list of ranks) and returns it.

    Every rank must call it, in the same order, with the same ranks. ValueError on every
    rank when the ranks differ between ranks, are malformed, or a set with the same ranks
    exists already."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%s is registered already" % process_set)
    process_set.process_set_id = _ops.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes a registered set (every rank must call it) and returns True; False for the
    global set or a set that is not registered. Ops still pending on the set fail."""
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    process_set._invalidate()
    _ops.remove_process_set(set_id)
    return True
