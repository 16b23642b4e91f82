#!/usr/bin/env bash
# Ring allreduce vs synchronous parameter servers on an emulated network.
#
# Every "host" is a network namespace chorus-psb-h<i> (address 10.77.0.<10+i>/24) joined by
# a veth pair to the bridge chorus-psb-br in the root namespace. Each host's link is shaped
# to --rate in BOTH directions with a token bucket (tbf): on the egress of the veth end
# inside the namespace (what the host sends) and on the egress of the bridge-side end (what
# it receives). So every host has a full-duplex port of rate B on an otherwise ideal switch.
# Hosts h1..h<W> run the workers (W = the largest --workers), h<W+1>.. the parameter servers
# (one ps per host).
#
# Shaping: tbf rate B, burst max(128 KiB, 2 ms of B) (at least two 64 KiB GSO packets, so
# tbf never has to split them, and small against a 64 MB step: 0.2%), latency 50 ms (the
# queue holds 50 ms of B before dropping: room for n senders converging on one ps port
# without a drop storm; it only delays, it does not change the rate).
#
# For each n in --workers: one ring run (n workers, chorus ring allreduce over TCP), then
# one ps run for each k in --ps (k servers, n workers; "n" means k = n). Each process prints
# a RESULT line; this script adds CPU lines (per process from /proc/<pid>/stat, machine-wide
# from /proc/stat) and runs analyze.py on them.
#
#   sudo bench/ps_vs_ring/run.sh [--build build] [--rate 500mbit] [--model-mb 64]
#        [--workers "2 3 4"] [--ps "1 2 n"] [--steps 3] [--warmup 1] [--rounds 1]
#        [--out DIR] [--png FILE] [--max-load 1.5] [--max-wait 300]
#
# --build: the CMake build folder holding bench/ps_vs_ring/ps_vs_ring_bench. --rate: a tc
# rate. --rounds R repeats the whole set R times (the table takes the median). Before each
# round the script waits up to --max-wait seconds for the 1-minute load average to fall to
# --max-load (other work on the machine steals CPU from the synchronous hand-offs), then
# measures anyway and says so. --png: where the plot goes (default OUT/ps_vs_ring.png).
#
# Needs root (namespaces, veth, tc) and iproute2. Cleans up everything it made on exit,
# error or Ctrl-C, and removes leftovers of an earlier run before it starts.
set -euo pipefail

command_line="$0$(printf ' %q' "$@")"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
rate=500mbit
model_mb=64
workers="2 3 4"
ps_list="1 2 n"
steps=3
warmup=1
rounds=1
out=/tmp/ps_vs_ring.$(date +%Y%m%d-%H%M%S)
png=""
max_load=1.5
max_wait=300

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2 ;;
    --rate) rate=$2 ;;
    --model-mb) model_mb=$2 ;;
    --workers) workers=$2 ;;
    --ps) ps_list=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --rounds) rounds=$2 ;;
    --out) out=$2 ;;
    --png) png=$2 ;;
    --max-load) max_load=$2 ;;
    --max-wait) max_wait=$2 ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown option $1" >&2; usage 2 ;;
  esac
  shift 2 || { echo "run.sh: $1 needs a value" >&2; exit 2; }
done

if [ "$(id -u)" -ne 0 ]; then
  echo "run.sh: needs root (network namespaces, veth pairs, tc); run it with sudo" >&2
  exit 2
fi
for tool in ip tc awk python3; do
  command -v $tool >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done
bin=$build/bench/ps_vs_ring/ps_vs_ring_bench
[ -x "$bin" ] || { echo "run.sh: $bin not built (cmake --build $build --target ps_vs_ring_bench)" >&2; exit 2; }

# tc rate -> bits per second ("500mbit", "1gbit", "800kbit"; tc's units are powers of 10).
rate_bps=$(awk -v r="$rate" 'BEGIN {
  n = r + 0; u = tolower(substr(r, length(n "") + 1))
  m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : (u == "bit" || u == "") ? 1 : -1
  if (m < 0 || n <= 0) exit 1; printf "%.0f", n * m }') || { echo "run.sh: bad --rate $rate" >&2; exit 2; }
burst=$(awk -v b="$rate_bps" 'BEGIN { x = b / 8 * 0.002; if (x < 131072) x = 131072; printf "%d", x }')
latency=50ms

max_w=0; for n in $workers; do [ "$n" -gt "$max_w" ] && max_w=$n; done
max_k=0
for k in $ps_list; do
  [ "$k" = n ] && k=$max_w
  [ "$k" -gt "$max_k" ] && max_k=$k
done
[ "$max_w" -ge 2 ] || { echo "run.sh: --workers needs sizes >= 2" >&2; exit 2; }

# The ps modes exist only when chorus_ps was built; without them, ring runs only.
rc=0; "$bin" ps-worker >/dev/null 2>&1 || rc=$?
if [ "$rc" -eq 3 ]; then
  echo "run.sh: $bin was built without chorus_ps: ring runs only" >&2
  ps_list=""; max_k=0
fi

prefix=chorus-psb
bridge=$prefix-br
ns_of() { echo "$prefix-h$1"; }
ip_of() { echo "10.77.0.$((10 + $1))"; }
pids=()

# Everything this script creates has the chorus-psb / psb-h prefix; so do leftovers.
cleanup() {
  local p ns
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-h" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    ip link del "psb-${ns#$prefix-}-b" 2>/dev/null || true  # deletes both ends of the pair
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

setup_network() {
  ip link add "$bridge" type bridge forward_delay 0 stp_state 0
  ip link set "$bridge" up
  local i ns outer inner
  for ((i = 1; i <= max_w + max_k; i++)); do
    ns=$(ns_of $i); outer=psb-h$i-b; inner=psb-h$i-n
    ip netns add "$ns"
    ip link add "$outer" type veth peer name "$inner" netns "$ns"
    ip link set "$outer" master "$bridge" up
    ip -n "$ns" addr add "$(ip_of $i)/24" dev "$inner"
    ip -n "$ns" link set "$inner" up
    ip -n "$ns" link set lo up
    tc qdisc replace dev "$outer" root tbf rate "$rate" burst "$burst" latency "$latency"
    ip netns exec "$ns" tc qdisc replace dev "$inner" root tbf rate "$rate" burst "$burst" latency "$latency"
  done
  # No ping on the machine: the first run's rendezvous is the reachability test; here the
  # links must at least be up.
  sleep 1
  for ((i = 1; i <= max_w + max_k; i++)); do
    ip -n "$(ns_of $i)" -o link show psb-h$i-n | grep -q 'state UP' ||
      { echo "run.sh: link of h$i is not up" >&2; ip -n "$(ns_of $i)" link show >&2; exit 1; }
  done
}

wait_for_quiet() {
  local waited=0 load
  while :; do
    load=$(awk '{print $1}' /proc/loadavg)
    awk -v l="$load" -v m="$max_load" 'BEGIN { exit !(l <= m) }' && return 0
    if [ "$waited" -ge "$max_wait" ]; then
      echo "run.sh: load $load still above $max_load after ${waited}s; measuring anyway" >&2
      return 0
    fi
    echo "run.sh: load $load > $max_load, waiting ($waited/${max_wait}s)" >&2
    sleep 15; waited=$((waited + 15))
  done
}

# /proc/stat's first line: "busy total softirq" jiffies of all cores, busy = user + nice +
# system + irq + softirq (not idle, iowait, or steal: time the hypervisor gave elsewhere).
sys_jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $2 + $3 + $4 + $7 + $8, t, $8 }' /proc/stat; }

# Every shaped qdisc's counters, the bridge side (root namespace) and each host's side.
qdisc_stats() {
  local i
  tc -s qdisc show
  for ((i = 1; i <= max_w + max_k; i++)); do
    echo "# in $(ns_of $i):"
    ip netns exec "$(ns_of $i)" tc -s qdisc show dev psb-h$i-n
  done
}

# "sent_bytes dropped" summed over the tbf qdiscs of a qdisc_stats file.
tbf_totals() {
  awk '/qdisc tbf/ { t = 1; next }
       t && /Sent/ { b += $2; d += $7 + 0; t = 0 }
       END { printf "%.0f %d\n", b, d }' "$1"
}

# Whether process $1 still runs (a zombie does not: it has exited, not yet been reaped).
running() { local s; s=$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; }

# Samples utime+stime of the run's processes twice a second into $1/cpu.samples until they
# exit (an exited process stays readable as a zombie until wait_run reaps it, so the last
# sample is usually its final count; the binary's own cpu_s is exact). Runs in the background.
sample_cpu() {
  local dir=$1 p; shift
  while :; do
    local alive=0
    for p in "$@"; do
      [ -r /proc/$p/stat ] || continue
      running "$p" && alive=1
      awk -v p="$p" -v t="$(date +%s.%N)" '{ print t, p, $14, $15 }' /proc/$p/stat 2>/dev/null
    done >>"$dir/cpu.samples"
    [ "$alive" -eq 1 ] || return 0
    sleep 0.5
  done
}

# Waits for the run's processes (limit in seconds), kills them past it. Status 0: all ok.
wait_run() {
  local limit=$1 start=$SECONDS p status=0
  while :; do
    local alive=0
    for p in "${pids[@]}"; do running "$p" && alive=1; done
    [ "$alive" -eq 0 ] && break
    if [ $((SECONDS - start)) -gt "$limit" ]; then
      echo "run.sh: run exceeded ${limit}s, killing it" >&2
      for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
      status=1; break
    fi
    sleep 0.2
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  return $status
}

# start <dir> <name> <host> <args...>: one process in host's namespace, output in dir/name.log
start() {
  local dir=$1 name=$2 host=$3; shift 3
  ip netns exec "$(ns_of "$host")" env "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
  echo "$! $name h$host" >>"$dir/pids"
}

# run_one <name> <n> <k>: k = 0 is the ring. Appends RESULT, CPU and SYS lines to results.
run_one() {
  local name=$1 n=$2 k=$3 dir=$out/$1 i port=$((29500 + run_index)) addrs=""
  run_index=$((run_index + 1))
  mkdir -p "$dir/done"
  : >"$dir/cpu.samples"
  local common=(CHORUS_SECRET="$secret" CHORUS_TIMEOUT_SECONDS=300)
  local load0 sys0 sys1 t0
  t0=$(date +%s.%N)
  load0=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)
  sys0=$(sys_jiffies)
  qdisc_stats >"$dir/tc.before" 2>&1
  pids=()
  if [ "$k" -eq 0 ]; then
    for ((i = 0; i < n; i++)); do
      start "$dir" worker$i $((i + 1)) "${common[@]}" RANK=$i WORLD_SIZE=$n LOCAL_RANK=0 \
        LOCAL_WORLD_SIZE=1 MASTER_ADDR="$(ip_of 1)" MASTER_PORT=$port CHORUS_TRANSPORT=tcp \
        CHORUS_ALLREDUCE_ALGO=ring "$bin" ring --model-mb "$model_mb" --steps "$steps" --warmup "$warmup"
    done
  else
    for ((i = 0; i < k; i++)); do
      addrs+="${addrs:+,}$(ip_of $((max_w + 1 + i))):$port"
      start "$dir" ps$i $((max_w + 1 + i)) "${common[@]}" "$bin" ps-server --listen "$(ip_of $((max_w + 1 + i))):$port"
    done
    for ((i = 0; i < n; i++)); do
      start "$dir" worker$i $((i + 1)) "${common[@]}" "$bin" ps-worker --ps "$addrs" --worker $i \
        --num-workers "$n" --done-dir "$dir/done" --model-mb "$model_mb" --steps "$steps" --warmup "$warmup"
    done
  fi
  sample_cpu "$dir" "${pids[@]}" &
  local sampler=$!
  # Generous: 4x the slowest model (one ps for all workers: 2 n D / B per step) plus start-up.
  local limit
  limit=$(awk -v n="$n" -v d="$model_mb" -v b="$rate_bps" -v s=$((steps + warmup)) \
    'BEGIN { printf "%d", 60 + 4 * s * 2 * n * d * 1048576 * 8 / b }')
  local ok=1
  wait_run "$limit" || ok=0
  wait "$sampler" 2>/dev/null || true
  sys1=$(sys_jiffies)
  qdisc_stats >"$dir/tc.after" 2>&1
  pids=()
  grep -h '^RESULT' "$dir"/*.log | sed "s/^RESULT /RESULT run=$name /" >>"$out/results.txt" || true
  # Per process: the last /proc sample (ticks -> seconds) against the process's wall time.
  awk -v run="$name" -v hz="$(getconf CLK_TCK)" -v pids="$dir/pids" '
    BEGIN { while ((getline l < pids) > 0) { split(l, f, " "); role[f[1]] = f[2] } }
    { if (!($2 in first)) first[$2] = $1; last[$2] = $1; cpu[$2] = ($3 + $4) / hz }
    END { for (p in cpu) printf "CPU run=%s pid=%s proc=%s cpu_s=%.2f sampled_wall_s=%.2f\n",
                               run, p, role[p], cpu[p], last[p] - first[p] }' \
    "$dir/cpu.samples" >>"$out/results.txt"
  echo "$sys0 $sys1 $(tbf_totals "$dir/tc.before") $(tbf_totals "$dir/tc.after")" | awk -v run="$name" -v w="$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { print t1 - t0 }')" -v l="$load0" \
    -v l1="$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)" -v ok=$ok \
    '{ printf "SYS run=%s busy_frac=%.3f softirq_frac=%.3f wall_s=%.1f load_before=%s load_after=%s tbf_sent_bytes=%.0f tbf_dropped=%d ok=%d\n",
             run, ($4 - $1) / ($5 - $2), ($6 - $3) / ($5 - $2), w, l, l1, $9 - $7, $10 - $8, ok }' >>"$out/results.txt"
  grep "run=$name " "$out/results.txt" | grep -E '^(RESULT|SYS)' | sed 's/^/  /'
  [ "$ok" -eq 1 ] || { echo "run.sh: run $name failed; logs in $dir" >&2; tail -n 3 "$dir"/*.log >&2; }
}

trap 'cleanup' EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM
cleanup  # leftovers of an earlier run
mkdir -p "$out"
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
run_index=0
setup_network
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(uname -r)"
  echo "command: $command_line"
  echo "settings: --build $build --rate $rate --model-mb $model_mb --workers \"$workers\" --ps \"$ps_list\" --steps $steps --warmup $warmup --rounds $rounds --out $out"
  echo "shaping: tbf rate $rate burst $burst latency $latency, both directions of every host link"
  echo "hosts: workers h1..h$max_w${ps_list:+, ps h$((max_w + 1))..h$((max_w + max_k))} (10.77.0.<10+i>)"
} | tee "$out/info.txt"
echo "CONFIG rate_bps=$rate_bps model_bytes=$((model_mb << 20)) steps=$steps warmup=$warmup cores=$(nproc)" >>"$out/results.txt"

for ((round = 1; round <= rounds; round++)); do
  wait_for_quiet  # once per round: the runs' own load would make a per-run check wait
  for n in $workers; do
    echo "== round $round, n=$n: ring"
    run_one "r${round}_ring_n$n" "$n" 0
    done_k=" "
    for k in $ps_list; do
      [ "$k" = n ] && k=$n
      case $done_k in *" $k "*) continue ;; esac  # "1 2 n" with n = 2: k = 2 once
      done_k+="$k "
      echo "== round $round, n=$n: ps k=$k"
      run_one "r${round}_ps_n${n}_k$k" "$n" "$k"
    done
  done
done

python3 "$here/analyze.py" "$out/results.txt" --out "$out" ${png:+--png "$png"}
