#!/usr/bin/env bash
# Python training throughput: chorus.torch against PyTorch DDP (gloo), one script, one run
# (docs/benchmarks.md, docs/python.md).
#
# train_fashion_mnist.py does the job of examples/fashion_mnist step for step (the tutorial
# CNN on Fashion-MNIST, batch 64 per worker, one thread per worker) with --backend chorus or
# ddp; both run under chorusrun. Configurations, interleaved --repeat times so the machine's
# noise hits all alike, medians reported. A run measures them in the order below, the next
# run in the reverse order (so drift over a run cancels), and each bar's two terms are
# neighbours: the hypervisor moves this machine's speed by 5-10 % every few minutes, and a
# ratio of two figures a minute apart measured that more than chorus (docs/benchmarks.md).
#   py-chorus-1                chorus.torch on 1 worker
#   cpp-2                      the C++ example, examples/fashion_mnist, on 2 workers: the same
#                              work per step, so chorus.torch's own cost shows as the ratio
#   solo-2                     two 1-worker chorus.torch jobs at once, their rates summed:
#                              what two workers on this machine do without communicating
#   py-chorus-2                chorus.torch on 2 workers
#   lock-2                     py-chorus-2 with --lockstep-only: no averaging, a barrier per
#                              step; lock-2 / solo-2 is what lockstep alone costs here
#   bal-2                      py-chorus-2 with --balance: the global batch split by each
#                              worker's speed in the step before (chorus.torch.BatchBalancer)
#   ddp-2, ddp-1               DDP on 2 and 1 workers
# Bars (issue 21): py-chorus-2 >= 0.95x solo-2 and >= 1.4x ddp-2; py-chorus-2 within 5% of
# cpp-2. The last lines give the medians of each run's own ratios too. Every figure is
# printed with the hypervisor's steal time and the cores' round trip before it (measure.sh).
#
#   bench/python/compare_training.sh [--build DIR] [--steps N] [--warmup N] [--repeat R]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../measure.sh"
build="$here/../../build"
steps=300
warmup=30
repeat=5
python=/usr/bin/python3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "compare_training.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
training_setup "$build" examples/fashion_mnist/fashion_mnist
[[ -f $build/python/chorus/torch/__init__.py ]] || { echo "chorus.torch not built in $build" >&2; exit 1; }
export PYTHONPATH=$build/python
script="$here/train_fashion_mnist.py"

py_rate() {  # backend workers [script args...] -> samples/s
  local port
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$chorusrun" -np "$2" "$python" "$script" \
      --backend "$1" --steps "$steps" --warmup-steps "$warmup" "${@:3}" 2>&1 |
    sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}
cpp_rate() { fashion_mnist_rate "$1" "$steps" "$warmup"; }

declare -a p1 p2 l2 b2 d1 d2 s2 c2 r_solo r_ddp r_cpp r_lock r_averaging r_balanced
echo "# python compare_training: $steps steps ($warmup warmup), batch 64/worker, 1 thread/worker, repeat $repeat"
echo "# $(cpu_model), $(getconf _NPROCESSORS_ONLN) cores, $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
run_config() {  # name: measures it, appends its rate to its array and to $line
  case "$1" in
    py-chorus-1) measure py_rate chorus 1; p1+=("$rate") ;;
    cpp-2) measure cpp_rate 2; c2+=("$rate") ;;
    solo-2) measure two_at_once py_rate chorus 1; s2+=("$rate") ;;
    py-chorus-2) measure py_rate chorus 2; p2+=("$rate") ;;
    lock-2) measure py_rate chorus 2 --lockstep-only; l2+=("$rate") ;;
    bal-2) measure py_rate chorus 2 --balance; b2+=("$rate") ;;
    ddp-2) measure py_rate ddp 2; d2+=("$rate") ;;
    ddp-1) measure py_rate ddp 1; d1+=("$rate") ;;
  esac
  line+="  $1 $rate ($steal%, $cores ns)"
}
order=(py-chorus-1 cpp-2 solo-2 py-chorus-2 lock-2 bal-2 ddp-2 ddp-1)
for ((i = 1; i <= repeat; i++)); do
  line="# run $i:"
  if ((i % 2)); then configs=("${order[@]}"); else configs=(); for c in "${order[@]}"; do configs=("$c" "${configs[@]}"); done; fi
  for c in "${configs[@]}"; do run_config "$c"; done
  r_solo+=("$(ratio "${p2[-1]}" "${s2[-1]}")")
  r_ddp+=("$(ratio "${p2[-1]}" "${d2[-1]}")")
  r_cpp+=("$(ratio "${p2[-1]}" "${c2[-1]}")")
  r_lock+=("$(ratio "${l2[-1]}" "${s2[-1]}")")
  r_averaging+=("$(ratio "${p2[-1]}" "${l2[-1]}")")
  r_balanced+=("$(ratio "${b2[-1]}" "${s2[-1]}")")
  echo "$line"
done
awk -v p1="$(median "${p1[@]}")" -v p2="$(median "${p2[@]}")" -v d1="$(median "${d1[@]}")" \
    -v d2="$(median "${d2[@]}")" -v s2="$(median "${s2[@]}")" -v c2="$(median "${c2[@]}")" \
    -v rs="$(median "${r_solo[@]}")" -v rd="$(median "${r_ddp[@]}")" -v rc="$(median "${r_cpp[@]}")" \
    -v l2="$(median "${l2[@]}")" -v rl="$(median "${r_lock[@]}")" -v ra="$(median "${r_averaging[@]}")" \
    -v b2="$(median "${b2[@]}")" -v rb="$(median "${r_balanced[@]}")" 'BEGIN {
  printf "%-12s %8s %12s\n", "system", "workers", "samples/s";
  printf "%-12s %8d %12.0f\n", "py-chorus", 1, p1;
  printf "%-12s %8d %12.0f\n", "py-chorus", 2, p2;
  printf "%-12s %8d %12.0f\n", "lock-2", 2, l2;
  printf "%-12s %8d %12.0f\n", "bal-2", 2, b2;
  printf "%-12s %8d %12.0f\n", "ddp-gloo", 1, d1;
  printf "%-12s %8d %12.0f\n", "ddp-gloo", 2, d2;
  printf "%-12s %8d %12.0f\n", "solo-2", 2, s2;
  printf "%-12s %8d %12.0f\n", "cpp-chorus", 2, c2;
  printf "py-chorus-2 / solo-2 = %.3fx (bar >= 0.95: %s); per-run median %.3fx\n", p2 / s2, (p2 / s2 >= 0.95 ? "met" : "NOT met"), rs;
  printf "py-chorus-2 / ddp-2 = %.2fx (bar >= 1.4: %s); per-run median %.2fx\n", p2 / d2, (p2 / d2 >= 1.4 ? "met" : "NOT met"), rd;
  printf "py-chorus-2 / cpp-2 = %.3fx (bar within 5%%: %s); per-run median %.3fx\n", p2 / c2, (p2 / c2 >= 0.95 && p2 / c2 <= 1.05 ? "met" : "NOT met"), rc;
  printf "bal-2 / solo-2 = %.3fx (bar >= 0.95: %s); per-run median %.3fx\n", b2 / s2, (b2 / s2 >= 0.95 ? "met" : "NOT met"), rb;
  printf "per-run medians: lock-2 / solo-2 = %.3fx (lockstep with no data); py-chorus-2 / lock-2 = %.3fx\n", rl, ra;
}'
