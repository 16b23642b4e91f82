#!/usr/bin/env bash
# Training throughput, chorus vs PyTorch DDP, in one run (docs/torch.md).
#
# The same job on both sides: the Fashion-MNIST CNN of examples/fashion_mnist (2.77 M
# parameters), the real IDX files of dataset-fashion-mnist, per-worker batch 64, SGD, one
# intra-op thread per worker (OMP/OpenBLAS threads 1 as well), 1 and 2 workers on this host.
# chorus: build/examples/fashion_mnist/fashion_mnist under chorusrun; DDP: Debian's
# python3-torch with the gloo backend (ddp_fashion_mnist.py). Each configuration runs
# --repeat times, interleaved (c1 c2 d1 d2 c1 c2 ...) so that the machine's noise hits all
# of them alike; the median is reported. samples/s counts global samples after the warmup.
#
# "solo-2" is the ceiling without any communication: two single-worker chorus jobs at the
# same time, their samples/s summed. On a 2-core host it shows what two workers can do at
# all (they share caches, memory bandwidth and the hypervisor's cores).
#
# "cores" is the same single-worker job on cpu 0 and on cpu 1 at once (measure.sh each_cpu):
# a synchronous 2-worker job steps at the slower core's pace, so 2 x the slower is its
# lockstep ceiling, and ceiling / solo-2 is what the host's unequal vCPUs alone leave of the
# 0.97x bar (issue 22). chorus-2 / ceiling is what chorus's communication costs on top.
#
# "lock-2" is the 2-worker chorus job with --lockstep-only: each worker steps on its own
# gradients and the two meet at a barrier once per step, exchanging no data. lock-2 / solo-2
# is what stepping in lockstep alone costs on this host, for any synchronous trainer;
# chorus-2 / lock-2 is what averaging the gradients costs on top.
#
# "bal-2" is chorus-2 with --balance: the global batch of 128 split by each worker's speed
# in the step before (chorus::BatchBalancer) instead of 64 each, the same samples and
# averaged gradient; bal-2 / solo-2 is what is left of the lockstep cost with it.
#
# Each figure is followed by the hypervisor's steal time while it ran (/proc/stat) and the
# cores' round trip just before it (near ~60 ns, far ~300 ns; measure.sh): on a shared
# host, runs with much steal are slow for reasons outside the job. The last two lines are
# the medians of each run's own chorus-2 / ddp-2 and chorus-2 / solo-2, which cancel drifts
# slower than a run.
#
# OpenBLAS: Debian's 0.3.21 does not know some recent Intel CPUs and falls back to its
# Prescott kernels (about 3x slower here); when it reports Prescott on a CPU with AVX-512
# and OPENBLAS_CORETYPE is unset, the script sets OPENBLAS_CORETYPE=SkylakeX for both sides.
#
#   bench/torch_ddp/compare_training.sh [--build DIR] [--steps N] [--warmup N] [--repeat R]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
steps=200
warmup=20
repeat=3
python=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    *) echo "compare_training.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
source "$here/../measure.sh"
training_setup "$build" examples/fashion_mnist/fashion_mnist
blas_setup "$python"

chorus_rate() { fashion_mnist_rate "$1" "$steps" "$warmup"; }  # workers -> samples/s
lockstep_rate() { fashion_mnist_rate 2 "$steps" "$warmup" --lockstep-only; }
balanced_rate() { fashion_mnist_rate 2 "$steps" "$warmup" --balance; }
ddp_rate() {
  "$python" "$here/ddp_fashion_mnist.py" --workers "$1" --steps "$steps" \
      --warmup-steps "$warmup" --threads 1 2>&1 | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}

declare -a c1 c2 l2 b2 d1 d2 s2 ceiling_share ceiling_ratio
echo "# compare_training: $steps steps ($warmup warmup), batch 64/worker, 1 thread/worker, repeat $repeat"
echo "# OpenBLAS core: ${blas_core:-unknown}; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "# $(getconf _NPROCESSORS_ONLN) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -a ddp_ratio solo_ratio lock_ratio averaging_ratio balanced_ratio
for ((i = 1; i <= repeat; i++)); do
  line="# run $i:"
  measure chorus_rate 1; c1+=("$rate"); line+="  chorus-1 $rate (steal $steal%, cores $cores ns)"
  measure chorus_rate 2; c2+=("$rate"); line+="  chorus-2 $rate ($steal%, $cores ns)"
  measure lockstep_rate; l2+=("$rate"); line+="  lock-2 $rate ($steal%, $cores ns)"
  measure balanced_rate; b2+=("$rate"); line+="  bal-2 $rate ($steal%, $cores ns)"
  measure ddp_rate 1; d1+=("$rate"); line+="  ddp-1 $rate ($steal%, $cores ns)"
  measure ddp_rate 2; d2+=("$rate"); line+="  ddp-2 $rate ($steal%, $cores ns)"
  measure two_at_once chorus_rate 1; s2+=("$rate"); line+="  solo-2 $rate ($steal%, $cores ns)"
  measure each_cpu chorus_rate 1; read -r cpu0 cpu1 <<<"$rate"
  line+="  cores $cpu0/$cpu1 ($steal%)"
  ceiling_share+=("$(lockstep_share "$cpu0" "$cpu1")")
  ceiling_ratio+=("$(awk -v a="${c2[-1]}" -v b="$cpu0" -v c="$cpu1" \
    'BEGIN {m = b < c ? b : c; print (m > 0 ? a / (2 * m) : 0)}')")
  ddp_ratio+=("$(ratio "${c2[-1]}" "${d2[-1]}")")
  solo_ratio+=("$(ratio "${c2[-1]}" "${s2[-1]}")")
  lock_ratio+=("$(ratio "${l2[-1]}" "${s2[-1]}")")
  averaging_ratio+=("$(ratio "${c2[-1]}" "${l2[-1]}")")
  balanced_ratio+=("$(ratio "${b2[-1]}" "${s2[-1]}")")
  echo "$line"
done
mc1=$(median "${c1[@]}"); mc2=$(median "${c2[@]}"); md1=$(median "${d1[@]}"); md2=$(median "${d2[@]}")
ms2=$(median "${s2[@]}"); mr=$(median "${ddp_ratio[@]}"); msr=$(median "${solo_ratio[@]}")
mcs=$(median "${ceiling_share[@]}"); mcr=$(median "${ceiling_ratio[@]}")
ml2=$(median "${l2[@]}"); mlr=$(median "${lock_ratio[@]}"); mar=$(median "${averaging_ratio[@]}")
mb2=$(median "${b2[@]}"); mbr=$(median "${balanced_ratio[@]}")
awk -v c1="$mc1" -v c2="$mc2" -v d1="$md1" -v d2="$md2" -v s2="$ms2" -v mr="$mr" -v msr="$msr" \
    -v mcs="$mcs" -v mcr="$mcr" -v l2="$ml2" -v mlr="$mlr" -v mar="$mar" -v b2="$mb2" \
    -v mbr="$mbr" 'BEGIN {
  printf "%-10s %8s %14s %12s\n", "system", "workers", "samples/s", "scaling";
  printf "%-10s %8d %14.0f %12s\n", "chorus", 1, c1, "-";
  printf "%-10s %8d %14.0f %11.0f%%\n", "chorus", 2, c2, 100 * c2 / (2 * c1);
  printf "%-10s %8d %14.0f %11.0f%%\n", "lock-2", 2, l2, 100 * l2 / (2 * c1);
  printf "%-10s %8d %14.0f %11.0f%%\n", "bal-2", 2, b2, 100 * b2 / (2 * c1);
  printf "%-10s %8d %14.0f %12s\n", "ddp-gloo", 1, d1, "-";
  printf "%-10s %8d %14.0f %11.0f%%\n", "ddp-gloo", 2, d2, 100 * d2 / (2 * d1);
  printf "%-10s %8d %14.0f %11.0f%%\n", "solo-2", 2, s2, 100 * s2 / (2 * c1);
  r = c2 / d2; e = c2 / (2 * c1);
  printf "chorus-2 / ddp-2 = %.2fx (bar >= 2x: %s); chorus 2-worker efficiency %.0f%% (bar >= 75%%: %s)\n",
         r, (r >= 2 ? "met" : "NOT met"), 100 * e, (e >= 0.75 ? "met" : "NOT met");
  printf "chorus-1 / ddp-1 = %.2fx; chorus-2 / solo-2 (no communication) = %.3fx",
         c1 / d1, c2 / s2;
  printf " (bar >= 0.97: %s)\n", (c2 / s2 >= 0.97 ? "met" : "NOT met");
  printf "median over runs of (chorus-2 / ddp-2 of the same run) = %.2fx\n", mr;
  printf "median over runs of (chorus-2 / solo-2 of the same run) = %.3fx\n", msr;
  printf "median over runs of the lockstep ceiling (2 x the slower core) / solo-2 = %.3fx;", mcs;
  printf " chorus-2 / that ceiling = %.3fx\n", mcr;
  printf "median over runs of (lock-2 / solo-2) = %.3fx: lockstep with no data;", mlr;
  printf " chorus-2 / lock-2 = %.3fx\n", mar;
  printf "bal-2 / solo-2 = %.3fx of the medians, %.3fx median over runs (bar >= 0.97: %s)\n",
         b2 / s2, mbr, (mbr >= 0.97 ? "met" : "NOT met");
}'
