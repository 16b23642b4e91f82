#!/usr/bin/env bash
# Shared-memory allreduce against where the two cores are: each round measures the cache-line
# round trip between cpu 0 and cpu 1 (build/bench/core_latency), then runs 2 ranks of
# chorus-bench with heap buffers as chorus chooses (from 16 MiB: the streaming ring, through
# memory when that ran faster lately: comm/placement.h), on the streaming ring as for near cores
# (CHORUS_SHM_PLACEMENT=near) and as for far ones (=far), on the single-copy ring
# (CHORUS_SHM_STREAMING_BYTES=0), with alloc_shared buffers (the allreduce in shared memory,
# as training's gradient buckets) and OpenMPI's vader, and prints one line: busbw in GB/s at
# each size. docs/algorithms.md ("Two placements") explains the use.
#
# usage: bench/shm_placement.sh [ROUNDS=10] [BUILD_DIR=build] [SIZES=16M,64M]
set -euo pipefail
source "$(dirname "$0")/measure.sh"
rounds=${1:-10}
build=${2:-build}
sizes=${3:-16M,64M}
bench="$build/bench/chorus-bench"
core_latency="$build/bench/core_latency"
chorusrun="$build/tools/chorusrun/chorusrun"
for tool in "$bench" "$core_latency" "$chorusrun"; do
  [[ -x "$tool" ]] || { echo "shm_placement.sh: $tool not built" >&2; exit 2; }
done
min=${sizes%%,*}
max=${sizes##*,}
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
args=(--op allreduce --dtype float32 --min-bytes "$min" --max-bytes "$max" --iters 30 --csv
      --out "$csv")
busbw() { awk -F, 'NR > 1 {printf "%s %.2f  ", $5 / 1048576 "M", $8}' "$csv"; }
# usage: chorus [VAR=value...] [-- chorus-bench args]
chorus() {
  local vars=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do vars+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  env CHORUS_TRANSPORT=shm "${vars[@]}" "$chorusrun" -np 2 -- "$bench" "${args[@]}" "$@" \
    >/dev/null 2>&1
  busbw
}
vader() {
  if command -v mpirun >/dev/null; then
    mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader "$bench" --peer mpi \
      "${args[@]}" >/dev/null 2>&1 && busbw
  else
    echo "no mpirun"
  fi
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(cpu_model), $(nproc) cores"
echo "# round: core round trip before/after (ns) | chorus's choice | streaming ring (near) | streaming ring (far) | single-copy ring | shared buffers | vader (busbw GB/s)"
for ((i = 1; i <= rounds; i++)); do
  before=$(core_round_trip)
  d=$(chorus)
  s=$(chorus CHORUS_SHM_PLACEMENT=near)
  f=$(chorus CHORUS_SHM_PLACEMENT=far)
  c=$(chorus CHORUS_SHM_STREAMING_BYTES=0)
  a=$(chorus -- --shared-buffers)
  v=$(vader)
  echo "$i: $before/$(core_round_trip) | $d| $s| $f| $c| $a| $v"
done
