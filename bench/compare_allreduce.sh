#!/usr/bin/env bash
# Side-by-side float32 allreduce on 2 ranks of this host, in one run, on the same sizes:
#   chorus-shm  chorus, CHORUS_TRANSPORT=shm
#   chorus-shared  chorus over shm with its buffers from Communicator::alloc_shared
#               (--shared-buffers: the allreduce runs in shared memory)
#   chorus-tcp  chorus, CHORUS_TRANSPORT=tcp (loopback)
#   mpi-vader   OpenMPI MPI_Allreduce, --mca btl self,vader (shared memory)
#   mpi-tcp     OpenMPI MPI_Allreduce, --mca btl self,tcp over lo
#   gloo        Gloo allreduce_ring_chunked, TCP transport over lo (default async pairs:
#               the device's event-loop thread, as PyTorch uses it)
#   gloo-sync   the same with synchronous (blocking) pairs, which is faster here; capped
#               at 16 MiB: from 64 MiB both ranks can block in write() and deadlock
# then prints merged tables with the ratio chorus/peer per size (busbw ratio; at 8 B the
# latency ratio) and the bars of issue 22 with PASS/FAIL.
#
# Ranks are bound to cores alike on every side: mpirun binds rank r to core r by default
# (2 ranks), chorusrun (--launcher) binds each local worker to its own cpus, and the
# background pairs of chorus and Gloo are started under `taskset -c r` here. Unbound
# pairs swung by up to 5x from run to run on a 2-vCPU Intel Xeon (docs/benchmarks.md).
#
# usage: bench/compare_allreduce.sh [--build DIR] [--min-bytes N] [--max-bytes N] [--rounds N]
#            [--timeout S] [--out DIR] [--launcher] [--only LIST] [-- bench args]
#   --build DIR   where chorus-bench was built (default: build); or set CHORUS_BENCH
#   --out DIR     keep the raw CSV and logs there (default: a temporary directory)
#   --launcher    start chorus ranks with chorusrun instead of two background processes
#   --no-bind     leave the background pairs (chorus, Gloo) unbound; mpirun then gets
#                 --bind-to none and chorusrun --bind-to none
#   --only LIST   comma-separated subset of the seven runs (e.g. mpi-vader,mpi-tcp,gloo)
#   --rounds N    run the seven N times, interleaved; the tables show the median per size
#   --timeout S   seconds allowed for one configuration's sweep (default 600)
# Extra arguments after -- go to every chorus-bench run (e.g. --iters 30).
# Exit status: 0 when every run that could run verified its results, 1 otherwise.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/measure.sh"  # core_round_trip
build="$here/../build"
min_bytes=8
max_bytes=256M
out=""
launcher=0
bind=1
rounds=1
run_timeout=600  # seconds for one configuration's sweep; a hung peer is killed
only="chorus-shm,chorus-shared,chorus-tcp,mpi-vader,mpi-tcp,gloo,gloo-sync"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --min-bytes) min_bytes="$2"; shift 2 ;;
    --max-bytes) max_bytes="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --launcher) launcher=1; shift ;;
    --no-bind) bind=0; shift ;;
    --only) only="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --timeout) run_timeout="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "compare_allreduce.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

bench="${CHORUS_BENCH:-$build/bench/chorus-bench}"
chorusrun="${CHORUSRUN:-$build/tools/chorusrun/chorusrun}"
if [[ ! -x "$bench" ]]; then
  echo "compare_allreduce.sh: no chorus-bench at $bench (build it, or use --build DIR)" >&2
  exit 2
fi
if [[ -z "$out" ]]; then
  out="$(mktemp -d /tmp/chorus-compare.XXXXXX)"
fi
mkdir -p "$out" || { echo "compare_allreduce.sh: cannot use $out as the results directory" >&2; exit 2; }
common=(--op allreduce --dtype float32 --min-bytes "$min_bytes" --max-bytes "$max_bytes" --csv
        "${extra[@]}")
status=0
suffix=""  # ".rK" for round K when --rounds > 1

wanted() { [[ ",$only," == *",$1,"* ]]; }

# A free TCP port on loopback (bash's /dev/tcp fails to connect where nothing listens).
free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
  echo 29500
}

# Rank r's cpu when pairs are bound (as mpirun binds rank r to core r); nothing when not
# bound or on one cpu.
pin() {
  local cpus
  cpus=$(getconf _NPROCESSORS_ONLN)
  [[ $bind == 1 && $cpus -ge 2 ]] && echo "taskset -c $(($1 % cpus))"
}

# Two ranks as background processes, rank 0 serving the store at MASTER_ADDR:MASTER_PORT.
# usage: run_pair NAME [VAR=VALUE...] -- chorus-bench args
run_pair() {
  local name="$1"; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  local port secret pids rc
  # free_port only checks; another process may take the port first. Then rank 0 cannot
  # listen, and the pair is started again on another port.
  for attempt in 1 2 3; do
    port="$(free_port)"
    secret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    pids=(); rc=0
    for rank in 0 1; do
      env "${vars[@]}" CHORUS_RANK=$rank CHORUS_SIZE=2 CHORUS_LOCAL_RANK=$rank \
        CHORUS_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" CHORUS_SECRET="$secret" \
        timeout -k 10 "$run_timeout" $(pin $rank) "$bench" "$@" \
        >"$out/$name$suffix.rank$rank.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[0]}" || rc=$?
    if [[ $rc != 0 ]] && grep -q "cannot listen on .*Address already in use" \
      "$out/$name$suffix.rank0.log"; then
      kill "${pids[1]}" 2>/dev/null; wait "${pids[1]}" 2>/dev/null
      continue  # rank 1 would only wait for the store until its timeout
    fi
    wait "${pids[1]}" || rc=$?
    break
  done
  return $rc
}

# usage: run_chorus NAME TRANSPORT [chorus-bench args]
run_chorus() {
  local name="$1" transport="$2"; shift 2
  local args=("${common[@]}" "$@" --label "$name" --out "$out/$name$suffix.csv")
  if [[ $launcher == 1 && -x "$chorusrun" ]]; then
    local binding=()
    [[ $bind == 1 ]] || binding=(--bind-to none)
    CHORUS_TRANSPORT="$transport" timeout -k 10 "$run_timeout" "$chorusrun" "${binding[@]}" -np 2 \
      -- "$bench" "${args[@]}" \
      >"$out/$name$suffix.rank0.log" 2>&1
  else
    run_pair "$name" CHORUS_TRANSPORT="$transport" -- "${args[@]}"
  fi
}

# usage: run_mpi NAME mca-args...
run_mpi() {
  local name="$1"; shift
  if ! command -v mpirun >/dev/null; then
    echo "mpirun: not installed (openmpi-bin)" >"$out/$name$suffix.rank0.log"
    return 3
  fi
  local binding=()
  [[ $bind == 1 ]] || binding=(--bind-to none)
  timeout -k 10 "$run_timeout" mpirun --allow-run-as-root --oversubscribe "${binding[@]}" \
    -np 2 "$@" \
    "$bench" --peer mpi "${common[@]}" --label "$name" --out "$out/$name$suffix.csv" \
    >"$out/$name$suffix.rank0.log" 2>&1
}

# The smaller of two sizes with optional K/M/G suffixes.
to_bytes() {
  local v="${1%[KkMmGg]}" unit="${1##*[0-9]}"
  case "$unit" in K|k) echo $((v << 10)) ;; M|m) echo $((v << 20)) ;; G|g) echo $((v << 30)) ;;
    *) echo "$v" ;; esac
}
smaller() { (( $(to_bytes "$1") < $(to_bytes "$2") )) && echo "$1" || echo "$2"; }

# usage: run_gloo NAME SYNC (CHORUS_BENCH_GLOO_SYNC: 0 async pairs, 1 blocking pairs)
run_gloo() {
  local name="$1" sync="$2" store
  store="$(mktemp -d "$out/gloo-store.XXXXXX")"
  local cap=()
  [[ $sync == 1 ]] && cap=(--max-bytes "$(smaller "$max_bytes" 16M)")
  run_pair "$name" CHORUS_BENCH_GLOO_SYNC="$sync" -- --peer gloo --gloo-store "$store" \
    --gloo-iface lo "${common[@]}" "${cap[@]}" --label "$name" --out "$out/$name$suffix.csv"
  local rc=$?
  rm -rf "$store"
  return $rc
}

# The cache-line round trip between the two cores just before a run ("" without the tool):
# the host may move this VM's vCPUs between near and far cores (docs/algorithms.md).
core_latency="$(dirname "$bench")/core_latency"
placement() {
  local ns
  ns=$(core_round_trip)
  [[ $ns == "?" ]] || echo " [cores: $ns ns]"
}

# Runs one configuration and reports how it went; a failure there does not stop the others.
attempt() {
  local name="$1"; shift
  wanted "$name" || return 0
  local start=$SECONDS rc=0 cores
  cores="$(placement)"
  "$@" || rc=$?
  local verdict="ok"
  if [[ $rc == 3 ]]; then
    verdict="not built: $(head -c 200 "$out/$name$suffix.rank0.log")"
    rm -f "$out/$name$suffix.csv"
  elif [[ $rc == 124 || $rc == 137 ]]; then
    verdict="TIMED OUT after ${run_timeout}s (killed; rows so far are kept)"; status=1
  elif [[ $rc != 0 ]]; then
    verdict="FAILED (exit $rc, see $out/$name$suffix.rank*.log)"; status=1
  fi
  printf '# %-11s %s (%ds)%s\n' "$name" "$verdict" $((SECONDS - start)) "$cores"
}

echo "# chorus allreduce comparison, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# host: $(nproc) cores, $(cpu_model)," \
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# bench: $bench ${common[*]} (rounds: $rounds)"
echo "# raw results: $out"
suffix=""
for ((round = 1; round <= rounds; round++)); do
  [[ $rounds -gt 1 ]] && { suffix=".r$round"; echo "# round $round of $rounds"; }
  attempt chorus-shm run_chorus chorus-shm shm
  attempt chorus-shared run_chorus chorus-shared shm --shared-buffers
  attempt chorus-tcp run_chorus chorus-tcp tcp
  attempt mpi-vader run_mpi mpi-vader --mca btl self,vader
  attempt mpi-tcp run_mpi mpi-tcp --mca btl self,tcp --mca btl_tcp_if_include lo
  attempt gloo run_gloo gloo 0
  attempt gloo-sync run_gloo gloo-sync 1
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

"$here/merge_results.sh" "$out" || status=1
exit $status
