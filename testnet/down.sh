#!/usr/bin/env bash
# Stop the local testnet started by up.sh (only the daemons it started, by pid).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run="${GPUMESH_TESTNET_DIR:-$here/run}"
[[ -f "$run/pids" ]] || { echo "no testnet running (no $run/pids)"; exit 0; }
while read -r pid name; do
  if kill -0 "$pid" 2>/dev/null && grep -q gpumesh "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
  fi
done <"$run/pids"
for _ in $(seq 1 50); do
  alive=0
  while read -r pid name; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$run/pids"
  (( alive == 0 )) && break
  sleep 0.1
done
while read -r pid name; do kill -KILL "$pid" 2>/dev/null || true; done <"$run/pids"
rm -f "$run/pids"
echo "gpumesh testnet stopped"
