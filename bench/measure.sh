# Helpers for the training comparisons (sourced): medians, and the hypervisor's steal time
# while a command ran (on a shared host, runs with much steal are slow for reasons outside
# the job, so every figure is printed with it).

# The share of CPU time the hypervisor gave to other guests between two /proc/stat lines.
cpu_line() { head -1 /proc/stat; }
steal_pct() {  # "before" "after"
  paste <(tr -s ' ' '\n' <<<"$1") <(tr -s ' ' '\n' <<<"$2") |
    awk 'NR > 1 {d = $2 - $1; t += d; if (NR == 9) s = d} END {printf "%.0f", t ? 100 * s / t : 0}'
}
# The cache-line round trip between cpu 0 and cpu 1 in ns ("?" without the tool or a
# second cpu). The host may move the vCPUs between near cores (~60 ns) and far ones (~300
# ns), and a 2-worker job's rate follows (docs/algorithms.md, "Two placements").
core_round_trip() {
  local ns=""
  [[ -x ${core_latency:-} ]] && ns=$("$core_latency" 0 1 0.3 2>/dev/null |
    sed -n 's/.*: \([0-9]*\) ns .*/\1/p')
  echo "${ns:-?}"
}
# measure command... -> sets $rate (the command's output), $steal (percent) and $cores (the
# round trip just before; scripts set $core_latency to build/bench/core_latency)
measure() {
  local before after
  cores=$(core_round_trip)
  before=$(cpu_line); rate=$("$@"); after=$(cpu_line); steal=$(steal_pct "$before" "$after")
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {print a / b}'; }  # a b -> a / b
# The CPU as lscpu names it: every figure is printed next to it.
cpu_model() { lscpu | sed -n 's/^Model name: *//p' | head -1; }
# Debian's OpenBLAS 0.3.21 does not know some recent Intel CPUs and falls back to its
# Prescott kernels (about 3x slower); chorusrun sets OPENBLAS_CORETYPE for its workers, and
# this does the same for both sides of a comparison: sets $blas_core to what OpenBLAS
# reports under `python` and exports OPENBLAS_CORETYPE=SkylakeX when that is Prescott on
# a CPU with AVX-512 and the variable is unset.
blas_setup() {  # python
  blas_core=$(OPENBLAS_VERBOSE=2 "$1" -c 'import torch' 2>&1 | sed -n 's/^Core: //p' | head -1 || true)
  if [[ -z ${OPENBLAS_CORETYPE:-} && $blas_core == Prescott ]] && grep -qw avx512f /proc/cpuinfo; then
    export OPENBLAS_CORETYPE=SkylakeX
  fi
}
# Runs a command twice at the same time and prints the sum of the two numbers they print:
# the "solo-2" ceiling, two single-worker jobs that do not communicate.
two_at_once() {  # command...
  local a b
  a=$(mktemp); b=$(mktemp)
  "$@" >"$a" & "$@" >"$b" & wait
  awk '{s += $1} END {print s}' "$a" "$b"; rm -f "$a" "$b"
}
# Runs a command on cpu 0 and, at the same time, on cpu 1 (each in a subshell bound to its
# cpu, which what it starts inherits) and prints both numbers: what each core does alone.
# A synchronous 2-worker job steps at the slower core's pace, so twice the smaller number
# is its "lockstep ceiling"; the host may give the two vCPUs unequal speeds (up to 1.2x
# apart on a 2-vCPU Intel Xeon, docs/benchmarks.md).
each_cpu() {  # command... (prints "0 0" on fewer than 2 cpus)
  local a b
  (($(getconf _NPROCESSORS_ONLN) >= 2)) || { echo "0 0"; return; }
  a=$(mktemp); b=$(mktemp)
  (taskset -p -c 0 $BASHPID >/dev/null && "$@") >"$a" &
  (taskset -p -c 1 $BASHPID >/dev/null && "$@") >"$b" &
  wait
  echo "$(cat "$a") $(cat "$b")"; rm -f "$a" "$b"
}
# 2 x the smaller of two numbers over their sum: what unequal cores leave a lockstep job.
lockstep_share() {
  awk -v a="$1" -v b="$2" 'BEGIN {print (a + b > 0 ? 2 * (a < b ? a : b) / (a + b) : 0)}'
}
# For the training comparisons: sets $chorusrun, $example (the program at build-relative
# path `example`) and $core_latency under `build`, and one OpenMP/BLAS thread per worker.
# Exits when the example is not built.
training_setup() {  # build example
  chorusrun="$1/tools/chorusrun/chorusrun"
  example="$1/$2"
  core_latency="$1/bench/core_latency"
  [[ -x $example ]] || { echo "not built: $example (needs libtorch)" >&2; exit 1; }
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
}
# The global samples/s of examples/fashion_mnist ($example) on `workers` workers, one
# thread each, after `warmup` of `steps` steps; further arguments go to the example, and
# the words of $chorusrun_options (e.g. "--bind-to none") to chorusrun.
fashion_mnist_rate() {  # workers steps warmup [example args...]
  # shellcheck disable=SC2086  # words, on purpose
  "$chorusrun" ${chorusrun_options:-} -np "$1" "$example" --epochs 1 --max-steps "$2" \
      --warmup-steps "$3" --skip-test --threads 1 "${@:4}" 2>&1 |
    sed -n 's/.*epoch 1:.* \([0-9.]*\) samples\/s.*/\1/p' | tail -1
}
