#!/usr/bin/env bash
# Show the market working on a testnet started by up.sh: discovery through
# the DHT, a job auctioned, leased, run and settled, and both ledgers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
run="${GPUMESH_TESTNET_DIR:-$here/run}"
bin="$root/bin/gpumesh"
r=(-d "$run/node0")
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "renter node"
"$bin" "${r[@]}" status

say "waiting for providers to advertise in the DHT"
for _ in $(seq 1 60); do
  count=$("$bin" "${r[@]}" providers --json | grep -c '"peer"' || true)
  (( count >= $(ls -d "$run"/node* | wc -l) - 1 )) && break
  sleep 1
done
say "all providers (DHT discovery)"
"$bin" "${r[@]}" providers
say "providers --gpu H100"
"$bin" "${r[@]}" providers --gpu H100
say "providers --region eu --min-vram 40"
"$bin" "${r[@]}" providers --region eu --min-vram 40

if "$bin" "${r[@]}" job --help >/dev/null 2>&1; then
  say "post a job: 1 GPU >=24GB in the EU, at most \$1.50/GPU-h, silver tier"
  out=$("$bin" "${r[@]}" job post --region eu --min-vram 24 --max-price 1.50 --tier silver --duration 10m --wait -- sh -c 'echo hello from $(hostname); for i in 1 2 3; do echo step $i; sleep 1; done; echo 42')
  echo "$out"
  id=$(echo "$out" | sed -n 's/^job \([^ ]*\).*/\1/p' | head -1)
  say "bids and why the winner won"
  "$bin" "${r[@]}" bids "$id"
  say "job logs"
  "$bin" "${r[@]}" job logs --follow "$id"
  say "job status"
  "$bin" "${r[@]}" job status "$id"
  say "renter ledger"
  "$bin" "${r[@]}" ledger list
  "$bin" "${r[@]}" ledger verify
fi
# GPU truth: challenge one provider's GPU. The testnet's GPUs are declared
# (no driver), so they answer on the CPU path and the verdict is
# "unverifiable"; on a GPU host (testnet/gpu-check.sh) it is "verified".
# Either way the signed verdict is gossiped to every node's reputation book.
prov=$("$bin" -d "$run/node1" status --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')
if [[ -n "$prov" && -d "$run/node2" ]]; then
  say "verify node1's GPU (gpumesh verify)"
  "$bin" "${r[@]}" verify "$prov" || true
  say "node2's reputation view of node1 (the verdict arrived by gossip)"
  for _ in $(seq 1 20); do
    "$bin" -d "$run/node2" reputation "$prov" | grep -q '^gpu ' && break
    sleep 0.5
  done
  "$bin" -d "$run/node2" reputation "$prov"
fi
say "done: stop the network with testnet/down.sh (or make testnet-down)"
