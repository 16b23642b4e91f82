#!/usr/bin/env bash
# Where a 2-worker step's CPU goes, chorus-2 against solo-2 (docs/benchmarks.md).
#
# compare_training.sh says how far chorus-2 falls short of solo-2 (two single-worker jobs
# with no communication); this says on what. Each round runs the Fashion-MNIST example of
# compare_training.sh (batch 64/worker, 1 thread/worker) as chorus-2, as lock-2 (lockstep
# with no averaging, --lockstep-only) and as solo-2, samples
# both cores with `perf record -a` at 1 kHz for --window seconds once the job is warm, and
# prints the CPU milliseconds spent per 1000 training samples in each group of code:
#   blas     OpenBLAS (the matrix products of convolutions and linear layers)
#   torch    libtorch's own code (on the bucket path it includes copying each gradient
#            into its bucket: DistributedOptimizer's adopt_gradient calls Tensor::copy_)
#   jit      oneDNN's generated kernels
#   memset / memcpy   glibc's (the allreduce's copies out of its L1 scratch are memcpy)
#   chorus   chorus's own code: reductions, waits
#   idle     cores with nothing to run (a worker waiting for the other)
#   other    everything else (kernel, libstdc++, Python-free glue)
# The sum is the CPU cost of 1000 samples; chorus-2's excess over solo-2 is what
# data-parallel training costs on this machine, split by where it is paid.
# Needs perf (Debian linux-perf) and /proc/sys/kernel/perf_event_paranoid <= 0 or root.
#
#   bench/torch_ddp/profile_training.sh [--build DIR] [--rounds R] [--window S]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
rounds=2
window=6
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    *) echo "profile_training.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "profile_training.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
build=$(cd "$build" && pwd)
source "$here/../measure.sh"
training_setup "$build" examples/fashion_mnist/fashion_mnist
blas_setup /usr/bin/python3
warm=4
# Enough steps to outlast the warm-up and the window at any rate this machine gives.
steps=$(( (warm + window + 4) * 60 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rate_of() { fashion_mnist_rate "$1" "$steps" 30; }  # workers -> the job's samples/s
chorus_2() { rate_of 2; }
lock_2() { fashion_mnist_rate 2 "$steps" 30 --lockstep-only; }
solo_2() { two_at_once rate_of 1; }

# perf data, samples/s -> one line of CPU ms per 1000 samples by group
breakdown() {
  perf report -i "$1" --stdio --no-children --sort dso,sym -F sample,dso,sym 2>/dev/null |
    awk -v rate="$2" -v window="$window" '
      /^#/ || NF < 3 { next }
      { n = $1; line = $0
        if (line ~ /libopenblas/) g["blas"] += n
        else if (line ~ /libtorch/) g["torch"] += n
        else if (line ~ /\[JIT\]/) g["jit"] += n
        else if (line ~ /memset/) g["memset"] += n
        else if (line ~ /memmove|memcpy/) g["memcpy"] += n
        else if (line ~ /chorus::/) g["chorus"] += n
        else if (line ~ /halt|idle|poll_idle/) g["idle"] += n
        else g["other"] += n
        total += n }
      END { f = 1000 / (window * rate)  # 1 sample = 1 ms of one core
        printf "%7.0f samples/s | ms per 1000 samples:", rate
        split("blas torch jit memset memcpy chorus idle other", k, " ")
        for (i = 1; i <= 8; i++) printf " %s %.0f", k[i], g[k[i]] * f
        printf " | total %.0f\n", total * f }'
}

echo "# profile_training: $(cpu_model), $(getconf _NPROCESSORS_ONLN) cores, ${window} s of perf at 1 kHz per run"
for ((i = 1; i <= rounds; i++)); do
  for mode in chorus_2 lock_2 solo_2; do
    cores=$(core_round_trip)
    "$mode" >"$work/rate" &
    job=$!
    sleep "$warm"
    perf record -a -F 1000 -e cpu-clock -o "$work/perf.data" -- sleep "$window" >/dev/null 2>&1
    wait "$job"
    echo "round $i ${mode/_/-} (cores $cores ns): $(breakdown "$work/perf.data" "$(cat "$work/rate")")"
  done
done
