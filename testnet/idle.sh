#!/usr/bin/env bash
# Measure the idle cost of a local N-node loopback network (default 50):
# CPU per daemon (ms of CPU time per second of wall time, from utime+stime
# in /proc/<pid>/stat) over a window after a warm-up, and resident memory
# (VmRSS) per daemon at the end of the window. Nothing is posted: this is
# the cost of just being on the network (DHT upkeep, re-advertising,
# GossipSub heartbeats, identify/ping, AutoNAT, the ledger).
# It starts its own network in testnet/run-idle (ports 4700+) and stops it.
#   WARMUP  seconds to wait after every node is up (default 30)
#   WINDOW  seconds to measure over (default 30)
#   GPUMESH_ADVERTISE_TTL  the providers' advertise_ttl (default 10m, the
#          daemon's own default: up.sh's 1m makes a demo network quick to
#          discover, and re-advertising then dominates an idle daemon)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
n="${1:-50}"
warmup="${WARMUP:-30}"
window="${WINDOW:-30}"
export GPUMESH_ADVERTISE_TTL="${GPUMESH_ADVERTISE_TTL:-10m}"
export GPUMESH_TESTNET_DIR="${GPUMESH_TESTNET_DIR:-$here/run-idle}" GPUMESH_TESTNET_PORT="${GPUMESH_TESTNET_PORT:-4700}"
trap '"$here/down.sh" >/dev/null 2>&1 || true' EXIT
"$here/up.sh" "$n" >/dev/null
run="$GPUMESH_TESTNET_DIR"
tck=$(getconf CLK_TCK)

cpu_ticks() { # pid: utime+stime in clock ticks (fields 14 and 15, after the comm field)
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

echo "$n nodes up (advertise_ttl $GPUMESH_ADVERTISE_TTL); warming up ${warmup}s, then measuring over ${window}s"
sleep "$warmup"
declare -A t0
while read -r pid _; do t0[$pid]=$(cpu_ticks "$pid"); done <"$run/pids"
s0=$(date +%s.%N)
sleep "$window"
s1=$(date +%s.%N)
: >"$run/idle.txt"
while read -r pid name; do
  if [[ ! -r /proc/$pid/stat ]]; then echo "$name (pid $pid) exited during the window" >&2; continue; fi
  t1=$(cpu_ticks "$pid")
  read -r rss anon <<<"$(awk '/^VmRSS/ {r = $2} /^RssAnon/ {a = $2} END {print r, a}' "/proc/$pid/status")"
  pss=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
  echo "$name $t1 ${t0[$pid]} $rss $anon $pss" >>"$run/idle.txt"
done <"$run/pids"
# columns: name cpu_ms_per_s rss_mib anon_rss_mib pss_mib
awk -v tck="$tck" -v s0="$s0" -v s1="$s1" '{printf "%s %.3f %.1f %.1f %.1f\n", $1, ($2 - $3) * 1000 / tck / (s1 - s0), $4 / 1024, $5 / 1024, $6 / 1024}' \
  "$run/idle.txt" >"$run/idle-per-node.txt"
p50() { sort -g | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)]}'; }
echo "nodes: $n on loopback, idle window $(awk -v a="$s0" -v b="$s1" 'BEGIN {printf "%.0f", b - a}') s after ${warmup}s warm-up"
awk -v p50="$(awk '{print $2}' "$run/idle-per-node.txt" | p50)" '
  {s += $2; if ($2 > m) m = $2; if ($1 == "node0") z = $2}
  END {printf "idle CPU per daemon: mean %.2f ms/s, p50 %s, max %.2f (renter/bootstrap node0 %.2f); all daemons %.1f ms/s\n", s / NR, p50, m, z, s}' \
  "$run/idle-per-node.txt"
awk -v p50="$(awk '{print $3}' "$run/idle-per-node.txt" | p50)" '
  {s += $3; a += $4; p += $5; if ($3 > m) m = $3; if ($1 == "node0") z = $3}
  END {printf "RSS per daemon: mean %.1f MiB, p50 %s, max %.1f (node0 %.1f)\n", s / NR, p50, m, z
       printf "  of which anonymous (heap, stacks): mean %.1f MiB; the rest is the binary mapped (shared by all)\n", a / NR
       printf "  proportional set size (shared pages split among sharers): mean %.1f MiB\n", p / NR}' \
  "$run/idle-per-node.txt"
