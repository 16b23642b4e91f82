#!/usr/bin/env bash
# What chorusrun --dashboard costs a training: Fashion-MNIST on 2 ranks, runs with the
# dashboard on and off interleaved (off, on, on, off, off, on, ...), samples/s of each run as the
# example prints it (epoch 1 after --warmup-steps) and the CPU seconds of the whole job,
# and the medians. docs/dashboard.md.
#
# usage: bench/dashboard_overhead.sh [RUNS=5] [BUILD_DIR=build] [extra fashion_mnist args...]
set -euo pipefail
runs=${1:-5}
build=${2:-build}
shift $(( $# > 2 ? 2 : $# )) || true
run=("$build/tools/chorusrun/chorusrun" -np 2)
prog=("$build/examples/fashion_mnist/fashion_mnist" --epochs 1 --skip-test --warmup-steps 30 "$@")
off=() on=() cpu_off=() cpu_on=()
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rate() { sed -n 's/.* \([0-9.]*\) samples\/s$/\1/p' "$out" | tail -1; }
# One run: its samples/s, and the CPU seconds (user + sys) of chorusrun and every rank, which
# other work on the machine disturbs far less than the wall clock.
one() {
  TIMEFORMAT='%U %S'
  { time "${run[@]}" "$@" "${prog[@]}" >"$out" 2>/dev/null; } 2>"$out.time"
  cpu=$(awk '{printf "%.2f", $1 + $2}' "$out.time")
  rm -f "$out.time"
  samples=$(rate)
}
run_off() { one; off+=("$samples") cpu_off+=("$cpu"); }
run_on() { one --dashboard 127.0.0.1:0; on+=("$samples") cpu_on+=("$cpu"); }
for i in $(seq 1 "$runs"); do
  # off, on, then on, off: neither setting always runs first
  if [ $((i % 2)) = 1 ]; then run_off; run_on; else run_on; run_off; fi
  echo "run $i: off ${off[-1]} samples/s (${cpu_off[-1]} CPU s), on ${on[-1]} samples/s (${cpu_on[-1]} CPU s)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a/b}'; }
m_off=$(median "${off[@]}") m_on=$(median "${on[@]}")
c_off=$(median "${cpu_off[@]}") c_on=$(median "${cpu_on[@]}")
echo "median samples/s: off $m_off, on $m_on (on/off $(ratio "$m_on" "$m_off"))"
echo "median CPU seconds of the job: off $c_off, on $c_on (on/off $(ratio "$c_on" "$c_off"))"
