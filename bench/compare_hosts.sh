#!/usr/bin/env bash
# Allreduce across two "hosts" of this machine: two network namespaces on a bridge, each
# host's link limited by tc (tbf, --rate), 2 ranks per host (4 in all). In one run, on the
# same sizes, interleaved over --rounds:
#   flat-ring     chorus, CHORUS_HIERARCHICAL_ALLREDUCE=0 CHORUS_ALLREDUCE_ALGO=ring
#   flat-auto     chorus, CHORUS_HIERARCHICAL_ALLREDUCE=0 (halving-doubling to 4 MiB, then ring)
#   hierarchical  chorus, CHORUS_HIERARCHICAL_ALLREDUCE=1
#   auto          chorus as it comes (the plan's choice)
#   chorus-mpi    chorus under mpirun with CHORUS_TRANSPORT=mpi (OpenMPI's tcp btl)
#   mpi           OpenMPI's MPI_Allreduce itself, under the same mpirun
# chorus runs start with chorusrun -H h1:2,h2:2 (tests/tools/fake_ssh.sh enters a host's
# namespace); the MPI runs with mpirun, its daemons started in the namespaces by
# tests/tools/netns_rsh.sh. Prints the median time per size and each path's ratio to the
# flat ring, then the bars of issue 23 section 4. Needs root and iproute2.
#
# usage: bench/compare_hosts.sh [--build DIR] [--rate RATE] [--rounds N] [--min-bytes N]
#            [--max-bytes N] [--only LIST] [--out DIR]
#   --rate RATE   tc rate of each host's link (default 1gbit)
#   --only LIST   comma-separated subset of the six runs
#   --merge DIR   only print the tables of an earlier run's results in DIR
# Arguments after -- go to every chorus-bench run (e.g. --iters 20 --warmup 2).
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
build="$root/build"
rate=1gbit
rounds=3
min_bytes=1M
max_bytes=64M
only="flat-ring,flat-auto,hierarchical,auto,chorus-mpi,mpi"
out=""
merge=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --min-bytes) min_bytes="$2"; shift 2 ;;
    --max-bytes) max_bytes="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --merge) merge="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "compare_hosts.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# The median time per (run, size) over rounds in DIR, and each run's ratio to the flat ring.
summarize() {
  awk -F, -v runs="$only" '
    FNR == 1 { next }
    $9 != "ok" { bad = 1 }
    { key = $1 SUBSEP $5; n[key]++; t[key, n[key]] = $6; sizes[$5] = 1 }
    function median(key,   i, j, m, v, tmp) {
      m = n[key]
      for (i = 1; i <= m; ++i) v[i] = t[key, i]
      for (i = 1; i <= m; ++i) for (j = i + 1; j <= m; ++j) if (v[j] < v[i]) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
      return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    END {
      k = split(runs, r, ",")
      line = "| size |"; sep = "|---|"
      for (i = 1; i <= k; ++i) { line = line " " r[i] " ms |"; sep = sep "---|" }
      for (i = 2; i <= k; ++i) { line = line " " r[i] "/flat-ring |"; sep = sep "---|" }
      print line; print sep
      m = 0; for (s in sizes) list[++m] = s + 0
      for (i = 1; i <= m; ++i) for (j = i + 1; j <= m; ++j) if (list[j] < list[i]) { x = list[i]; list[i] = list[j]; list[j] = x }
      worst = 1e9
      for (q = 1; q <= m; ++q) {
        s = list[q]; line = "| " s / 1048576 " MiB |"
        for (i = 1; i <= k; ++i) {
          key = r[i] SUBSEP s
          ms[i] = (key in n) ? median(key) / 1000 : 0
          line = line (ms[i] ? sprintf(" %.1f |", ms[i]) : " n/a |")
        }
        best = 0
        for (i = 2; i <= k; ++i) {
          ratio = (ms[1] && ms[i]) ? ms[1] / ms[i] : 0
          line = line (ratio ? sprintf(" %.2fx |", ratio) : " n/a |")
          if (r[i] != "mpi" && ratio > best) best = ratio
        }
        print line
        if (best && best < worst) worst = best
        if (q == m) last = best
      }
      printf "\nbest chorus path / flat ring: %.2fx at the largest size (bar >= 1.2x: %s), worst size %.2fx (bar >= 0.95x: %s)\n", last, (last >= 1.2 ? "PASS" : "FAIL"), worst, (worst >= 0.95 ? "PASS" : "FAIL")
      if (bad) print "some run did not verify its results (check column)"
      exit bad
    }' "$1"/*.csv
}

if [[ -n "$merge" ]]; then summarize "$merge"; exit; fi
bench="$build/bench/chorus-bench"
chorusrun="$build/tools/chorusrun/chorusrun"
for f in "$bench" "$chorusrun"; do
  [[ -x "$f" ]] || { echo "compare_hosts.sh: no $f (build it, or use --build DIR)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "compare_hosts.sh: needs root (network namespaces)" >&2; exit 2; }
[[ -n "$out" ]] || out="$(mktemp -d /tmp/chorus-hosts.XXXXXX)"
mkdir -p "$out"
source "$here/measure.sh"

tag=$$
net="10.$((100 + tag % 50)).$((tag / 50 % 250))"  # the hosts' /24, unique per run
ns1="chorus_b${tag}_1" ns2="chorus_b${tag}_2" br="cb${tag}b"
h1="$net.2" h2="$net.3"

cleanup() {
  for k in 1 2; do
    ip link del "cb${tag}o$k" 2>/dev/null
    ip netns del "chorus_b${tag}_$k" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
}
trap cleanup EXIT

set -e
ip link add "$br" type bridge
ip addr add "$net.1/24" dev "$br"
ip link set "$br" up
for k in 1 2; do
  ns="chorus_b${tag}_$k" outer="cb${tag}o$k" inner="cb${tag}i$k" addr="$net.$((k + 1))"
  ip netns add "$ns"
  ip link add "$outer" type veth peer name "$inner" netns "$ns"
  ip link set "$outer" master "$br" up
  ip -n "$ns" addr add "$addr/24" dev "$inner"
  ip -n "$ns" link set "$inner" up
  ip -n "$ns" link set lo up
  # What leaves the host: its "NIC". The bridge side is left unlimited (the switch).
  ip netns exec "$ns" tc qdisc add dev "$inner" root tbf rate "$rate" burst 512kb latency 100ms
done
set +e

export FAKE_SSH_NETNS="$h1=$ns1 $h2=$ns2"
common=(--op allreduce --dtype float32 --min-bytes "$min_bytes" --max-bytes "$max_bytes" --csv
        "${extra[@]}")

run_chorus() {  # name env...
  local name=$1; shift
  env "$@" CHORUS_SECRET="bench-hosts-$tag" timeout -k 10 900 "$chorusrun" -np 4 \
    -H "$h1:2,$h2:2" --rsh "$root/tests/tools/fake_ssh.sh" -- \
    "$bench" "${common[@]}" --label "$name" --out "$out/$name$suffix.csv" \
    >"$out/$name$suffix.log" 2>&1
}

run_mpirun() {  # name bench-args...
  local name=$1; shift
  timeout -k 10 900 mpirun --allow-run-as-root -np 4 -H "$h1:2,$h2:2" \
    --mca plm_rsh_agent "$root/tests/tools/netns_rsh.sh" \
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
    --mca btl self,tcp --mca rtc_hwloc_vmhole none \
    -x CHORUS_TRANSPORT=mpi -x CHORUS_SECRET="bench-hosts-$tag" \
    "$bench" "${common[@]}" --label "$name" --out "$out/$name$suffix.csv" "$@" \
    >"$out/$name$suffix.log" 2>&1
}

# Two OpenMPI daemons on one machine fail now and then (docs/launcher.md): one retry.
attempt() {
  local name=$1; shift
  "$@" && return 0
  echo "  $name failed (log: $out/$name$suffix.log); once more" >&2
  "$@"
}

wanted() { [[ ",$only," == *",$1,"* ]]; }
echo "compare_hosts.sh: 2 hosts x 2 ranks, links $rate, $(cpu_model), results in $out" >&2
for ((k = 1; k <= rounds; ++k)); do
  suffix=".r$k"
  echo "round $k of $rounds" >&2
  wanted flat-ring && attempt flat-ring run_chorus flat-ring CHORUS_HIERARCHICAL_ALLREDUCE=0 \
    CHORUS_ALLREDUCE_ALGO=ring
  wanted flat-auto && attempt flat-auto run_chorus flat-auto CHORUS_HIERARCHICAL_ALLREDUCE=0
  wanted hierarchical && attempt hierarchical run_chorus hierarchical \
    CHORUS_HIERARCHICAL_ALLREDUCE=1
  wanted auto && attempt auto run_chorus auto CHORUS_HIERARCHICAL_ALLREDUCE=auto
  wanted chorus-mpi && attempt chorus-mpi run_mpirun chorus-mpi
  wanted mpi && attempt mpi run_mpirun mpi --peer mpi
done
summarize "$out"
