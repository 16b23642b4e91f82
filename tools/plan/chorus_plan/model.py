"""The cost model of chorus-plan: docs/planner.md says where every term comes from.

Units: seconds, bytes, bytes per second. Nothing here reads files or runs programs; the
functions take validated inputs (inputs.py) and return costs split into their latency
(alpha), bandwidth (beta) and reduction (gamma) parts, so that the report can say why an
algorithm wins.
"""
import dataclasses
import math

KIB = 1024
MIB = 1024 * 1024
ALGORITHMS = ("ring", "halving_doubling", "hierarchical", "auto", "ps_sync", "ps_async")


@dataclasses.dataclass(frozen=True)
class Level:
    """One level of the network: a message costs alpha + bytes / bandwidth (one stream)."""
    alpha: float
    bandwidth: float

    @property
    def beta(self):
        return 1.0 / self.bandwidth


@dataclasses.dataclass(frozen=True)
class Topology:
    """hosts x local ranks, ranks packed by host (ranks 0..L-1 on host 0, as chorusrun -H)."""
    hosts: int
    local: int

    @property
    def size(self):
        return self.hosts * self.local

    def host(self, rank):
        return rank // self.local


@dataclasses.dataclass(frozen=True)
class Network:
    intra: Level  # between ranks of one host (shared memory)
    inter: Level  # a host's link to the others (its NIC: one per host, full duplex)
    gamma: float  # seconds per byte reduced (one input added into an accumulator)


@dataclasses.dataclass
class Cost:
    """A time split by cause; `+` adds, `*` scales."""
    alpha: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0

    @property
    def total(self):
        return self.alpha + self.beta + self.gamma

    def __add__(self, other):
        return Cost(self.alpha + other.alpha, self.beta + other.beta, self.gamma + other.gamma)

    def __mul__(self, k):
        return Cost(self.alpha * k, self.beta * k, self.gamma * k)

    def bound(self):
        """'latency-bound' when the alpha terms are the larger part, else 'bandwidth-bound'."""
        return "latency-bound" if self.alpha > self.beta + self.gamma else "bandwidth-bound"


def step_cost(net, topo, sends, nbytes):
    """One step of an algorithm: every (src, dst) in `sends` sends `nbytes` at once.

    A step lasts as long as its slowest send. Sends within a host cost intra's
    alpha + n beta each (every pair has its own shared-memory ring). Sends across hosts
    share their hosts' links: a link that carries s streams out (or in; the link is full
    duplex) takes inter alpha + s n beta.
    """
    out, into, local = {}, {}, False
    for src, dst in sends:
        hs, hd = topo.host(src), topo.host(dst)
        if hs == hd:
            local = True
        else:
            out[hs] = out.get(hs, 0) + 1
            into[hd] = into.get(hd, 0) + 1
    best = Cost()
    if local:
        best = Cost(net.intra.alpha, nbytes * net.intra.beta)
    if out:
        streams = max(max(out.values()), max(into.values()))
        cross = Cost(net.inter.alpha, streams * nbytes * net.inter.beta)
        if cross.total > best.total:
            best = cross
    return best


def ring(net, topo, groups, nbytes):
    """Ring allreduce of `nbytes` in each group at once: 2(q-1) steps of n/q, reduce (q-1)/q n."""
    q = len(groups[0])
    if q == 1:
        return Cost()
    sends = [(g[i], g[(i + 1) % q]) for g in groups for i in range(q)]
    return step_cost(net, topo, sends, nbytes / q) * (2 * (q - 1)) + Cost(
        gamma=(q - 1) / q * nbytes * net.gamma)


def _fold(q):
    """Non-power-of-two q: p2 and the real index of each of the p2 participants (chorus's fold)."""
    p2 = 1 << (q.bit_length() - 1)
    extra = q - p2
    real = [2 * i + 1 if i < extra else i + extra for i in range(p2)]
    return p2, extra, real


def _exchange(groups, real, mask):
    return [(g[real[i]], g[real[i ^ mask]]) for g in groups for i in range(len(real))]


def halving_doubling(net, topo, groups, nbytes):
    """Rabenseifner as src/comm/halving_doubling.cc runs it: after the fold of the first
    2(q - p2) ranks (even sends its input to odd, gets the result back), reduce-scatter by
    recursive halving (mask p2/2 down to 1, mask/p2 of the buffer each way), then allgather
    by recursive doubling (mask 1 up to p2/2)."""
    q = len(groups[0])
    if q == 1:
        return Cost()
    p2, extra, real = _fold(q)
    cost = Cost()
    if extra:
        fold = [(g[2 * i], g[2 * i + 1]) for g in groups for i in range(extra)]
        back = [(b, a) for a, b in fold]
        cost += step_cost(net, topo, fold, nbytes) + step_cost(net, topo, back, nbytes)
        cost += Cost(gamma=nbytes * net.gamma)
    mask = p2 // 2
    while mask >= 1:
        part = nbytes * mask / p2
        cost += step_cost(net, topo, _exchange(groups, real, mask), part) * 2  # halving, doubling
        mask //= 2
    return cost + Cost(gamma=(p2 - 1) / p2 * nbytes * net.gamma)


def recursive_doubling(net, topo, groups, nbytes):
    """lg p2 exchanges of the whole buffer (after the same fold), one reduction each."""
    q = len(groups[0])
    if q == 1:
        return Cost()
    p2, extra, real = _fold(q)
    cost = Cost()
    if extra:
        fold = [(g[2 * i], g[2 * i + 1]) for g in groups for i in range(extra)]
        cost += step_cost(net, topo, fold, nbytes) + step_cost(net, topo, [(b, a) for a, b in fold],
                                                               nbytes)
        cost += Cost(gamma=nbytes * net.gamma)
    mask = 1
    while mask < p2:
        cost += step_cost(net, topo, _exchange(groups, real, mask), nbytes)
        cost += Cost(gamma=nbytes * net.gamma)
        mask *= 2
    return cost


def by_size(net, topo, groups, nbytes):
    """chorus's flat plan by size (docs/algorithms.md): 3 ranks ring; <= 16 KiB recursive
    doubling (<= 1 MiB for 2 ranks across hosts); <= 4 MiB halving-doubling; larger the
    ring."""
    q = len(groups[0])
    if q == 3 or nbytes > 4 * MIB:
        return ring(net, topo, groups, nbytes)
    if nbytes <= 16 * KIB or (q == 2 and topo.hosts > 1 and nbytes <= MIB):
        return recursive_doubling(net, topo, groups, nbytes)
    return halving_doubling(net, topo, groups, nbytes)


def hierarchical(net, topo, nbytes):
    """Within hosts (ring reduce-scatter), local rank l of every host allreduces slice l by
    the flat plan (the L slices cross at once and share each host's link), within hosts again
    (ring allgather). One host, or one rank per host: the flat plan."""
    world = [list(range(topo.size))]
    if topo.hosts == 1 or topo.local == 1:
        return by_size(net, topo, world, nbytes)
    hosts = [list(range(h * topo.local, (h + 1) * topo.local)) for h in range(topo.hosts)]
    slices = [[h * topo.local + l for h in range(topo.hosts)] for l in range(topo.local)]
    local_ring = ring(net, topo, hosts, nbytes)  # reduce-scatter + allgather of the whole
    return local_ring + by_size(net, topo, slices, nbytes / topo.local)


def allreduce(algorithm, net, topo, nbytes):
    """The cost of one allreduce of `nbytes` on every rank."""
    if topo.size == 1:
        return Cost()
    world = [list(range(topo.size))]
    if algorithm == "ring":
        return ring(net, topo, world, nbytes)
    if algorithm == "halving_doubling":
        return halving_doubling(net, topo, world, nbytes)
    if algorithm == "hierarchical":
        return hierarchical(net, topo, nbytes)
    if algorithm == "auto":  # the plan: hierarchical from 1 MiB on uniform hosts, else by size
        if topo.hosts > 1 and topo.local > 1 and nbytes >= MIB:
            return hierarchical(net, topo, nbytes)
        return by_size(net, topo, world, nbytes)
    raise ValueError("unknown allreduce algorithm %r" % algorithm)


@dataclasses.dataclass(frozen=True)
class Job:
    """What one training step needs (inputs.py validates it)."""
    compute: float  # seconds of forward + backward + update per step on one worker
    batch: int  # samples per worker per step
    gradient_bytes: float
    tensors: int
    overlap: float  # share of `compute` during which gradients' collectives can run (0..1)
    fusion: float  # bytes per fused collective; 0: one collective per tensor
    ps_servers: int = 1  # k, for the ps algorithms
    # Compute per step of each worker when `host_ranks` workers share a host and all compute
    # at once (no communication); 0: the same as `compute` (each worker has cores of its own).
    host_compute: float = 0.0
    host_ranks: int = 1
    # Cores of a host; 0: unknown (collectives always have a core to run on while compute runs).
    cores_per_host: int = 0
    # How one worker's steps vary: each step's time minus the mean, sorted, from timelines of
    # one-worker runs on a full host; empty: every step lasts the same.
    step_spread: tuple = ()

    def overlap_on(self, topo):
        """The share of compute that collectives can hide behind. A rank's collectives copy and
        reduce on its engine thread, which overlaps the compute only on a core the host's
        compute threads (one per rank) leave free; with no core to spare they add to the step."""
        if self.cores_per_host <= 0:
            return self.overlap
        spare = max(0, self.cores_per_host - topo.local)
        return self.overlap * min(1.0, spare / topo.local)

    def straggler(self, workers):
        """What lockstep costs: a synchronous step ends with its slowest worker's, so it lasts
        the expected maximum of `workers` draws of one worker's step, here above the mean by
        sum_i d_i ((i/m)^n - ((i-1)/m)^n) over the m sorted deviations d_i (the expected maximum
        of n draws from what was measured; it never exceeds the largest one measured)."""
        d, m = self.step_spread, len(self.step_spread)
        if workers <= 1 or m == 0:
            return 0.0
        return sum(x * ((i / m) ** workers - ((i - 1) / m) ** workers)
                   for i, x in enumerate(d, start=1))

    def compute_on(self, topo):
        """Compute per step with topo.local workers on a host: from `compute` (one) to
        `host_compute` (host_ranks), linearly in between."""
        if self.host_compute <= 0 or self.host_ranks <= 1 or topo.local <= 1:
            return self.compute
        share = min(1.0, (topo.local - 1) / (self.host_ranks - 1))
        return self.compute + (self.host_compute - self.compute) * share


@dataclasses.dataclass
class Prediction:
    workers: int
    step: float  # seconds per step (async ps: per worker cycle)
    comm: Cost  # communication of one step, before overlap
    exposed: float  # the part of comm the step waits for
    why: str  # latency-bound, bandwidth-bound, ps-link-bound, worker-link-bound

    def samples_per_s(self, job):
        return self.workers * job.batch / self.step

    def efficiency(self, job):
        """Against one worker alone: samples/s over workers x one worker's samples/s."""
        return job.compute / self.step


def buckets(job):
    """Collectives per step: gradient bytes / fusion threshold, at least 1, at most one per
    tensor (a tensor is never split); fusion 0 means one per tensor."""
    if job.fusion <= 0:
        return job.tensors
    return max(1, min(job.tensors, math.ceil(job.gradient_bytes / job.fusion)))


def negotiation(net, topo):
    """The engine agrees on ready tensors once per collective: an int32 allreduce (4 bytes,
    recursive doubling) before it."""
    return recursive_doubling(net, topo, [list(range(topo.size))], 4)


def predict_allreduce(algorithm, job, net, topo):
    """A synchronous data-parallel step: compute, the wait for the slowest worker, then what
    of the gradients' allreduces the overlap window (overlap x compute, during backward, on
    the cores compute leaves free) could not hide. The last bucket leaves when backward ends,
    so it is never hidden."""
    c = job.compute_on(topo)
    if topo.size == 1:
        return Prediction(1, c, Cost(), 0.0, "no communication")
    m = buckets(job)
    one = allreduce(algorithm, net, topo, job.gradient_bytes / m) + negotiation(net, topo)
    comm = one * m
    exposed = max(one.total, comm.total - job.overlap_on(topo) * c)
    return Prediction(topo.size, c + job.straggler(topo.size) + exposed, comm, exposed,
                      comm.bound())


def predict_ps(sync, job, net, topo):
    """Parameter servers: k servers, each on a host of its own with an inter-level link;
    every worker pushes D and pulls D per step; ranks on one host share its link.

    sync:  compute + the wait for the slowest worker + push phase + ps apply + pull phase,
           each phase max(L D / B, n D / (k B)) + alpha (the pull waits for the round's last
           push).
    async: a worker's cycle is compute + push + pull at its own link's rate, unless the ps
           links (n D / k each way per cycle, full duplex) are slower:
           max(compute + 2 (alpha + L D / B), n D / (k B)).
    """
    n, k, d, c = topo.size, job.ps_servers, job.gradient_bytes, job.compute_on(topo)
    beta, alpha = net.inter.beta, net.inter.alpha
    worker = topo.local * d * beta  # this worker's share of its host's link, one direction
    server = n * d / k * beta  # one ps's link, one direction, per round
    apply = Cost(gamma=n * d / k * net.gamma)  # the ps sums the n pushes of its shards
    if sync:
        phase = Cost(alpha, max(worker, server))
        comm = phase * 2 + apply
        why = "ps-link-bound" if server > worker else "worker-link-bound"
        return Prediction(n, c + job.straggler(n) + comm.total, comm, comm.total, why)
    own = Cost(2 * alpha, 2 * worker)
    cycle = max(c + own.total, server)
    why = "ps-link-bound" if server > c + own.total else "worker-link-bound"
    return Prediction(n, cycle, own, cycle - c, why)


def predict(algorithm, job, net, topo):
    if algorithm == "ps_sync":
        return predict_ps(True, job, net, topo)
    if algorithm == "ps_async":
        return predict_ps(False, job, net, topo)
    return predict_allreduce(algorithm, job, net, topo)


def topology_for(workers, local):
    """Workers spread over hosts of `local` ranks each (fewer workers than that: one host)."""
    if workers <= local:
        return Topology(1, workers)
    if workers % local:
        raise ValueError("%d workers do not fill hosts of %d ranks" % (workers, local))
    return Topology(workers // local, local)
