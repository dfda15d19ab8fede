#!/usr/bin/env bash
# Side by side with Bacalhau's devstack, measured as ../shared/bench/bacalhau/README.md says:
# ROUNDS alternating rounds (Bacalhau, then gpumesh), each after a warm-up of 10 jobs at 5 in
# flight: 200 jobs at 20 in flight and 50 sequential, both systems driven by the shared load
# generator the same way, with its measure.sh's CPU accounting. gpumesh runs as users run it:
# 11 separate daemons from up.sh (node0 the renter, which lists nothing first).
#
#   BACALHAU=/path/to/bacalhau testnet/sidebyside.sh [ROUNDS]    (default 3)
#
# BACALHAU is a bacalhau binary built with the shared no-op executor patch (the README there says
# how); without it only gpumesh runs. SHARED (default ../shared/bench/bacalhau next to this
# checkout) holds loadgen.go and measure.sh; OUT (default a fresh temp dir) gets every run's
# output and summary.txt. GPUMESH_TESTNET_PORT (default 4700) is the testnet's first port.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
rounds="${1:-3}"
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "sidebyside: ROUNDS must be 1..99, got '$rounds'" >&2; exit 2; }
shared="${SHARED:-$root/../shared/bench/bacalhau}"
for f in loadgen.go measure.sh; do
  [[ -f "$shared/$f" ]] || { echo "sidebyside: no $shared/$f (set SHARED to the shared bench dir)" >&2; exit 2; }
done
bac="${BACALHAU:-}"
if [[ -n "$bac" && ! -x "$bac" ]]; then
  echo "sidebyside: BACALHAU=$bac is not an executable" >&2; exit 2
fi
out="${OUT:-$(mktemp -d -t gpumesh-sbs-XXXXXX)}"
mkdir -p "$out/lg" "$out/res"
port="${GPUMESH_TESTNET_PORT:-4700}"

echo "building gpumesh and the load generator..."
make -C "$root" build >/dev/null
cp "$shared/loadgen.go" "$out/lg/"
(cd "$out/lg" && { [[ -f go.mod ]] || go mod init lg >/dev/null 2>&1; } && go mod tidy >/dev/null 2>&1 && go build -o ../lgbin .)
lg="$out/lgbin"
measure() { LG="$lg" RES="$out/res" bash "$shared/measure.sh" "$@" >/dev/null; }

gmdir="$out/gm"
bacpid=""
cleanup() {
  GPUMESH_TESTNET_DIR="$gmdir" "$here/down.sh" >/dev/null 2>&1 || true
  [[ -n "$bacpid" ]] && kill -TERM "$bacpid" 2>/dev/null && wait "$bacpid" 2>/dev/null
  return 0
}
trap cleanup EXIT

gm_round() { # label
  rm -rf "$gmdir"
  GPUMESH_TESTNET_DIR="$gmdir" GPUMESH_TESTNET_PORT="$port" "$here/up.sh" 11 >"$out/$1.up.log" 2>&1
  local pids sock="$gmdir/node0/gpumesh.sock"
  pids="$(cut -d' ' -f1 "$gmdir/pids" | tr '\n' ' ')"
  "$lg" -sys gm -socks "$sock" -bid-window 500ms -duration 1m -n 10 -c 5 -poll 50ms -out /dev/null >/dev/null
  measure "$1.c20" "$pids" -sys gm -socks "$sock" -bid-window 500ms -duration 1m -n 200 -c 20 -poll 50ms
  measure "$1.c1" "$pids" -sys gm -socks "$sock" -bid-window 500ms -duration 1m -n 50 -c 1 -poll 5ms
  GPUMESH_TESTNET_DIR="$gmdir" "$here/down.sh" >/dev/null
}

bac_round() { # label
  local b="$out/bac"
  rm -rf "$b" && mkdir -p "$b"
  BAC_DEVSTACK_NOOP=1 IGNORE_PID_AND_PORT_FILES=1 "$bac" --data-dir "$b/home" devstack --computes 10 \
    --stack-repo "$b/stack10" >"$b/log" 2>&1 &
  bacpid=$!
  local up=0
  for _ in $(seq 1 600); do
    if [[ "$(curl -s 127.0.0.1:1234/api/v1/orchestrator/nodes 2>/dev/null | grep -o CONNECTED | wc -l)" -ge 10 ]]; then
      up=1; break
    fi
    kill -0 "$bacpid" 2>/dev/null || break
    sleep 0.2
  done
  (( up )) || { echo "sidebyside: Bacalhau's devstack did not come up; see $b/log" >&2; exit 1; }
  "$lg" -sys bac -n 10 -c 5 -poll 50ms -out /dev/null >/dev/null
  measure "$1.c20" "$bacpid" -sys bac -n 200 -c 20 -poll 50ms
  measure "$1.c1" "$bacpid" -sys bac -n 50 -c 1 -poll 5ms
  kill -TERM "$bacpid"; wait "$bacpid" 2>/dev/null || true
  bacpid=""
}

# row LABEL: jobs/s and CPU per job at 20 in flight, sequential p50.
row() {
  local r="$out/res/$1"
  printf '%-8s %8s jobs/s %7s ms/job  seq p50 %s ms\n' "$1" \
    "$(awk '/^throughput/ {print $2}' "$r.c20.txt")" \
    "$(sed -n 's/.*(\([0-9.]*\) ms\/job.*/\1/p' "$r.c20.txt")" \
    "$(awk '/^submit->done/ {print $3}' "$r.c1.txt")"
}

for i in $(seq 1 "$rounds"); do
  if [[ -n "$bac" ]]; then
    echo "round $i: Bacalhau"; bac_round "bac$i"; row "bac$i" | tee -a "$out/summary.txt"
  fi
  echo "round $i: gpumesh"; gm_round "gm$i"; row "gm$i" | tee -a "$out/summary.txt"
done
echo "every run's output: $out/res; this summary: $out/summary.txt"
