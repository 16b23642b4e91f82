#!/usr/bin/env bash
# Merges the CSV files of bench/compare_allreduce.sh (chorus-shm, chorus-shared, chorus-tcp,
# mpi-vader, mpi-tcp, gloo, gloo-sync; any may be missing) into two markdown tables with ratios chorus/peer, and
# checks issue 22's bars. With several rounds (NAME.rK.csv) a size's time is the median over
# rounds. Ratios: busbw chorus / busbw peer (= time peer / time chorus; higher is better for
# chorus); at 8 B the latency ratio time chorus / time peer (lower is better), marked "lat".
# The bars are a benchmark, not a test: a missed bar prints FAIL but does not change the
# exit status, which is 1 only when a run's check column says FAIL (wrong results).
# usage: bench/merge_results.sh DIR
set -uo pipefail
dir="${1:?usage: merge_results.sh DIR}"
files=()
for name in chorus-shm chorus-shared chorus-tcp mpi-vader mpi-tcp gloo gloo-sync; do
  for f in "$dir/$name.csv" "$dir/$name".r*.csv; do
    [[ -s "$f" ]] && files+=("$f")
  done
done
if [[ ${#files[@]} == 0 ]]; then
  echo "merge_results.sh: no results in $dir" >&2
  exit 1
fi

awk -F, '
function human(b) {
  if (b >= 1048576) return sprintf("%g MiB", b / 1048576)
  if (b >= 1024) return sprintf("%g KiB", b / 1024)
  return b " B"
}
function has(c, s) { return ((c, s) in t) }
function us(c, s) { return has(c, s) ? sprintf("%.2f", t[c, s]) : "n/a" }
function bw(c, s) { return has(c, s) ? sprintf("%.3f", bus[c, s]) : "n/a" }
# chorus/peer: busbw ratio, or at 8 B the latency ratio.
function ratio(c, p, s) {
  if (!has(c, s) || !has(p, s) || t[c, s] <= 0 || t[p, s] <= 0) return ""
  return s == 8 ? t[c, s] / t[p, s] : t[p, s] / t[c, s]
}
# Median of the space-separated numbers in list.
function median(list,   v, m, i, j, x) {
  m = split(list, v, " ")
  for (i = 2; i <= m; i++) {
    x = v[i] + 0
    for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]
    v[j + 1] = x
  }
  return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
}
function show(r, s) {
  if (r == "") return "n/a"
  return sprintf("%.2fx%s", r, s == 8 ? " lat" : "")
}
# Prints a verdict line; measured: whether the figures exist.
function bar(text, measured, ok, detail) {
  if (!measured) { printf "- %s: not yet measured\n", text; return }
  printf "- %s: %s (%s)\n", text, ok ? "PASS" : "FAIL", detail
}
$1 == "backend" || /^#/ || NF < 9 { next }
{
  c = $1; s = $5 + 0
  times[c, s] = times[c, s] " " ($6 + 0)
  factor[c, s] = 2 * ($4 - 1) / $4  # allreduce busbw factor (nccl-tests)
  if (!(s in seen)) { seen[s] = 1; sizes[++n] = s }
  if ($9 != "ok") { bad = bad " " c "@" s; failed = 1 }
}
END {
  for (k in times) {
    t[k] = median(times[k])
    split(k, key, SUBSEP)
    bus[k] = t[k] > 0 ? key[2] / t[k] / 1e3 * factor[k] : 0
  }
  # sizes in ascending order (insertion sort; a sweep has a few dozen)
  for (i = 2; i <= n; i++) {
    v = sizes[i]
    for (j = i - 1; j >= 1 && sizes[j] > v; j--) sizes[j + 1] = sizes[j]
    sizes[j + 1] = v
  }
  print "Shared memory (2 ranks, float32 sum; time in us, busbw in GB/s):"
  print ""
  print "| size | chorus-shm us | chorus-shm busbw | chorus-shared us | chorus-shared busbw | mpi-vader us | mpi-vader busbw | chorus-shm/mpi-vader | chorus-shared/mpi-vader |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= n; i++) {
    s = sizes[i]
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", human(s),
           us("chorus-shm", s), bw("chorus-shm", s), us("chorus-shared", s),
           bw("chorus-shared", s), us("mpi-vader", s), bw("mpi-vader", s),
           show(ratio("chorus-shm", "mpi-vader", s), s),
           show(ratio("chorus-shared", "mpi-vader", s), s)
  }
  print ""
  print "TCP loopback (2 ranks, float32 sum; time in us, busbw in GB/s):"
  print ""
  print "| size | chorus-tcp us | chorus-tcp busbw | mpi-tcp us | mpi-tcp busbw | gloo us | gloo busbw | gloo-sync us | gloo-sync busbw | chorus/mpi-tcp | chorus/gloo | chorus/gloo-sync |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= n; i++) {
    s = sizes[i]
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", human(s),
           us("chorus-tcp", s), bw("chorus-tcp", s), us("mpi-tcp", s), bw("mpi-tcp", s),
           us("gloo", s), bw("gloo", s), us("gloo-sync", s), bw("gloo-sync", s),
           show(ratio("chorus-tcp", "mpi-tcp", s), s), show(ratio("chorus-tcp", "gloo", s), s),
           show(ratio("chorus-tcp", "gloo-sync", s), s)
  }
  print ""
  print "Bars (issue 22):"
  # chorus-shm: buffers from the heap; chorus-shared: buffers from alloc_shared.
  split("chorus-shm chorus-shared", mine, " ")
  for (m = 1; m <= 2; m++) {
    c = mine[m]
    for (k = 1; k <= 2; k++) {
      s = k == 1 ? 16777216 : 67108864
      r = ratio(c, "mpi-vader", s)
      bar(sprintf("%s: %s busbw >= 1.5x OpenMPI vader", c, human(s)), r != "", r >= 1.5,
          sprintf("%.2fx", r))
    }
    r = ratio(c, "mpi-vader", 8)
    bar(sprintf("%s: 8 B latency <= 1.5x OpenMPI vader", c), r != "", r != "" && r <= 1.5,
        sprintf("%.2fx: %s us vs %s us", r, us(c, 8), us("mpi-vader", 8)))
  }
  split("mpi-tcp gloo gloo-sync", peers, " ")
  for (k = 1; k <= 3; k++) {
    p = peers[k]; worst = ""; at = 0; count = 0
    for (i = 1; i <= n; i++) {
      s = sizes[i]
      if (s < 524288 || s > 67108864) continue
      r = ratio("chorus-tcp", p, s)
      if (r == "") continue
      count++
      if (worst == "" || r < worst) { worst = r; at = s }
    }
    bar(sprintf("TCP loopback 512 KiB-64 MiB busbw >= 1.2x %s", p), count > 0, worst >= 1.2,
        sprintf("lowest %.2fx at %s over %d sizes", worst, human(at), count))
  }
  r = ratio("chorus-tcp", "mpi-tcp", 8)
  bar("TCP loopback: 8 B latency <= OpenMPI tcp", r != "", r != "" && r <= 1.0,
      sprintf("%.2fx: %s us vs %s us", r, us("chorus-tcp", 8), us("mpi-tcp", 8)))
  if (bad != "") printf "- verification FAILED in:%s\n", bad
  exit failed
}' "${files[@]}"
