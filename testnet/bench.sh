#!/usr/bin/env bash
# Benchmark a local N-node loopback network (default 20):
#  - DHT discovery latency (p50/p95) of `providers` queries from the renter
#  - time from `job post` to a confirmed lease (p50/p95), with a 500ms bid window
#  - daemon RSS at idle (mean/max over all nodes)
# It starts its own network in testnet/run-bench (ports 4500+) and stops it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
n="${1:-20}"
queries="${QUERIES:-60}"
posts="${POSTS:-30}"
export GPUMESH_TESTNET_DIR="$here/run-bench" GPUMESH_TESTNET_PORT="${GPUMESH_TESTNET_PORT:-4500}"
trap '"$here/down.sh" >/dev/null 2>&1 || true' EXIT
"$here/up.sh" "$n" >/dev/null
sock="$GPUMESH_TESTNET_DIR/node0/gpumesh.sock"
api() { curl -sf --unix-socket "$sock" "$@"; }
pct() { # p: percentile of numbers on stdin
  sort -g | awk -v p="$1" '{a[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; printf "%.1f", a[i]*1000}'
}

printf 'waiting for %d providers to advertise...' $((n - 1))
for _ in $(seq 1 120); do
  c=$(api "http://x/v1/providers" | grep -o '"peer":' | wc -l || true)
  (( c >= n - 1 )) && break
  sleep 1
done
echo " $c found"

qs=("gpu=H100" "gpu=A100" "gpu=RTX4090" "gpu=L4" "region=eu" "region=us" "min_vram=40" "region=eu&min_vram=40" "gpu=A100&region=eu")
: >"$GPUMESH_TESTNET_DIR/disc.txt"
for ((i = 0; i < queries; i++)); do
  q=${qs[$((i % ${#qs[@]}))]}
  curl -sf -o /dev/null -w '%{time_total}\n' --unix-socket "$sock" "http://x/v1/providers?$q" >>"$GPUMESH_TESTNET_DIR/disc.txt"
done

: >"$GPUMESH_TESTNET_DIR/post.txt"
for ((i = 0; i < posts; i++)); do
  body='{"job":{"tier":"silver","max_price":10,"gpu_count":1,"duration":60000000000,"bid_window":500000000,"run":{"command":["true"]}}}'
  out=$(curl -sf -w '\n%{time_total}' --unix-socket "$sock" -X POST http://x/v1/jobs -d "$body")
  if grep -Eq '"state":"(leased|finished)"' <<<"$out"; then tail -1 <<<"$out" >>"$GPUMESH_TESTNET_DIR/post.txt"; fi
done

# Idle memory is measured once every posted job has finished (none pending
# or running on the renter's view), waiting at most 30 s.
for _ in $(seq 1 300); do
  api "http://x/v1/jobs" | grep -Eq '"run":"(pending|running)"' || break
  sleep 0.1
done
rss=()
while read -r pid _; do
  rss+=("$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")")
done <"$GPUMESH_TESTNET_DIR/pids"
leased=$(wc -l <"$GPUMESH_TESTNET_DIR/post.txt")
echo "nodes: $n (1 renter + $((n - 1)) providers) on loopback"
echo "discovery latency over $queries queries: p50 $(pct 50 <"$GPUMESH_TESTNET_DIR/disc.txt") ms, p95 $(pct 95 <"$GPUMESH_TESTNET_DIR/disc.txt") ms"
echo "post -> confirmed lease ($leased/$posts leased, bid window 500 ms): p50 $(pct 50 <"$GPUMESH_TESTNET_DIR/post.txt") ms, p95 $(pct 95 <"$GPUMESH_TESTNET_DIR/post.txt") ms"
printf '%s\n' "${rss[@]}" | awk '{s+=$1; if ($1>m) m=$1} END {printf "daemon RSS at idle: mean %.1f MiB, max %.1f MiB\n", s/NR/1024, m/1024}'
starts=$(grep -ho 'start_latency=[0-9.]*[mµ]*s' "$GPUMESH_TESTNET_DIR"/node*/daemon.log | sed 's/start_latency=//' | head -200)
if [[ -n "$starts" ]]; then
  echo "$starts" | awk '{v=$1; if (v ~ /µs$/) {sub(/µs/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else {sub(/s/,"",v); v*=1000}; print v/1000}' |
    { mapfile -t a; printf '%s\n' "${a[@]}" >"$GPUMESH_TESTNET_DIR/start.txt"; }
  echo "lease confirmed -> process started: p50 $(pct 50 <"$GPUMESH_TESTNET_DIR/start.txt") ms, p95 $(pct 95 <"$GPUMESH_TESTNET_DIR/start.txt") ms ($(wc -l <"$GPUMESH_TESTNET_DIR/start.txt") jobs)"
fi
