#!/usr/bin/env bash
# Interleaved trials of chorus's 2-rank allreduce over loopback TCP under several
# environments, one size at a time: on a VM whose loopback speed can flip within seconds
# (docs/algorithms.md), only trials taken turn about compare two variants fairly.
#
# usage: bench/tcp_variants.sh [--build DIR] [--trials N] SIZE VARIANT... [-- bench args]
#   SIZE      bytes per rank, K/M suffixes (e.g. 1M)
#   VARIANT   space-separated VAR=VALUE settings for one variant, e.g.
#             CHORUS_ALLREDUCE_ALGO=halving_doubling ("-" for none); CHORUS_BENCH=PATH
#             runs another chorus-bench (an older build, say)
#   bench args  go to every run (e.g. --offset 64)
# Prints, per variant, the busbw (GB/s) of every trial in ascending order and the median.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/measure.sh"  # median, cpu_model
build="$here/../build"
trials=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --trials) trials="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [[ $# -lt 2 ]]; then
  echo "usage: bench/tcp_variants.sh [--build DIR] [--trials N] SIZE VARIANT... [-- bench args]" >&2
  exit 2
fi
size="$1"; shift
variants=() extra=()
while [[ $# -gt 0 && $1 != "--" ]]; do variants+=("$1"); shift; done
[[ $# -gt 0 ]] && { shift; extra=("$@"); }
bench="$build/bench/chorus-bench"
[[ -x $bench ]] || { echo "tcp_variants.sh: no chorus-bench at $bench" >&2; exit 2; }
logs="$(mktemp -d /tmp/chorus-tcp-variants.XXXXXX)"

# One trial: two ranks over loopback TCP; prints the busbw.
trial() {
  local vars=() port secret pids=() rank binary="$bench" var
  if [[ $1 != "-" ]]; then
    for var in $1; do
      if [[ $var == CHORUS_BENCH=* ]]; then binary="${var#CHORUS_BENCH=}"; else vars+=("$var"); fi
    done
  fi
  port=$((20000 + RANDOM % 40000))
  secret="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  for rank in 0 1; do
    env "${vars[@]}" CHORUS_TRANSPORT=tcp CHORUS_RANK=$rank CHORUS_SIZE=2 \
      CHORUS_LOCAL_RANK=$rank CHORUS_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      CHORUS_SECRET="$secret" timeout -k 5 120 "$binary" --min-bytes "$size" --max-bytes "$size" \
      --iters 100 --warmup 5 "${extra[@]}" >"$logs/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  awk '/^ *[0-9]/ && $5 == "ok" {print $4}' "$logs/rank0.log"
}

echo "# chorus-tcp variants, $(date -u '+%Y-%m-%d %H:%M UTC'), $(cpu_model), $size per rank" \
  "${extra[*]}"
declare -A got
for ((i = 0; i < trials; i++)); do
  for variant in "${variants[@]}"; do got[$variant]+=" $(trial "$variant")"; done
done
for variant in "${variants[@]}"; do
  read -ra values <<<"${got[$variant]}"
  printf '%s: %s | median %s\n' "$variant" "$(printf '%s\n' "${values[@]}" | sort -g | xargs)" \
    "$(median "${values[@]}")"
done
rm -rf "$logs"
