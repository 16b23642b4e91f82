// Which cpus each worker chorusrun starts on this host may run on (--bind-to).
//
// A rank's main thread, its engine thread and the peers it waits for in every step share
// the host's cores. Left to the scheduler, the threads of one rank wander onto the cores of
// another (the engine thread wakes wherever a core is free) and the ranks fall out of step:
// on a 2-core machine, 2 workers trained 1-2 % slower than when each kept to one core
// (docs/benchmarks.md). So, as OpenMPI's mpirun does for two ranks or fewer, chorusrun gives
// each local worker a share of the cpus it may itself use: local rank i of n gets the i-th
// of n contiguous runs, sizes differing by at most one, the hardware threads of a core kept
// together. Threads and processes a worker starts inherit its share (OpenMP sizes its pool
// to it). Ranks on ssh hosts and elastic workers (which come and go) are not bound; under
// --mpi, mpirun binds.
#pragma once

#include <string>
#include <vector>

namespace chorus::run {

enum class BindTo {
  kAuto,  // bind when the host has at least one cpu per local worker, else leave it
  kCore,  // bind; more local workers than cpus is a usage error
  kNone,  // never bind
};

// "auto", "core", "none"; UsageError otherwise.
BindTo parse_bind_to(const std::string& text);
const char* bind_to_name(BindTo bind);

// The cpus this process may run on (sched_getaffinity), ordered by package, core and cpu
// number as `sysfs` (/sys/devices/system/cpu) tells them, so that a core's hardware threads
// are adjacent; by cpu number where it tells nothing.
std::vector<int> allowed_cpus(const std::string& sysfs = "/sys/devices/system/cpu");
// The same ordering for a given set of cpus (for tests: any sysfs-like directory).
std::vector<int> order_by_core(std::vector<int> cpus, const std::string& sysfs);

// The cpus of local rank `local_rank` of `local_size`; empty when it is not bound (kNone,
// kAuto with more local workers than `cpus`, or a rank outside [0, local_size)). kCore with more
// workers than cpus throws UsageError.
std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_size,
                           BindTo bind);

// "0-3,8,10-11" (the kernel's cpu list format).
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace chorus::run
