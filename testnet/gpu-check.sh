#!/usr/bin/env bash
# GPU host check: on a machine with NVIDIA GPUs, start a provider (real NVML
# inventory) and a renter on loopback, post one concurrent 1-GPU job per
# device, and check that each job saw exactly one device and that no two
# jobs saw the same one. Prints what each job saw and the per-device
# telemetry from the renter's verified heartbeats.
#
#   testnet/gpu-check.sh            # all devices
#   GPUMESH_GPU_CHECK_JOBS=3 testnet/gpu-check.sh
#
# Exits 1 with "no NVIDIA GPU found" on a machine without one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
fail() { echo "gpu-check: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || fail "no NVIDIA GPU found (nvidia-smi -L fails or is absent)"
devices=$(nvidia-smi -L | grep -c '^GPU ')
(( devices > 0 )) || fail "no NVIDIA GPU found"
jobs="${GPUMESH_GPU_CHECK_JOBS:-$devices}"
echo "gpu-check: $devices device(s):"
nvidia-smi -L

bin="$root/bin/gpumesh"
(cd "$root" && CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/gpumesh ./cmd/gpumesh)
run="$(mktemp -d /tmp/gpumesh-gpu-check.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${keep:-0}" == 1 ]]; then echo "gpu-check: logs kept in $run" >&2; else rm -rf "$run"; fi
}
trap cleanup EXIT
port="${GPUMESH_GPU_CHECK_PORT:-4700}"

mkdir -p "$run/renter" "$run/provider"
cat >"$run/renter/config.yaml" <<CFG
region: local
listen: [/ip4/127.0.0.1/tcp/$port]
provider:
  heartbeat_interval: 1s
CFG
cat >"$run/provider/config.yaml" <<CFG
region: local
listen: [/ip4/127.0.0.1/tcp/$((port + 1))]
provider:
  enabled: true
  gpu_source: nvml
  executor: process
  heartbeat_interval: 1s
  advertise_ttl: 1m
  policy: {price_floor: 0.01, accept_preemptible: true}
CFG
"$bin" -d "$run/renter" daemon >"$run/renter.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do "$bin" -d "$run/renter" status >/dev/null 2>&1 && break; sleep 0.1; done
peer=$("$bin" -d "$run/renter" status --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')
"$bin" -d "$run/provider" daemon --bootstrap "/ip4/127.0.0.1/tcp/$port/p2p/$peer" >"$run/provider.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do "$bin" -d "$run/provider" status >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" -d "$run/provider" status | sed 's/^/  provider: /'
echo "gpu-check: waiting for the provider's capability record"
for _ in $(seq 60); do
  "$bin" -d "$run/renter" providers --json | grep -q '"peer"' && break
  sleep 1
done
"$bin" -d "$run/renter" providers

echo "gpu-check: posting $jobs concurrent 1-GPU job(s)"
job_cmd='echo "CVD=$CUDA_VISIBLE_DEVICES"; nvidia-smi -L; sleep 5'
for ((i = 0; i < jobs; i++)); do
  "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 1 --duration 2m --wait -- sh -c "$job_cmd" \
    >"$run/job$i.out" 2>&1 &
  posts+=($!)
done
status=0
for p in "${posts[@]}"; do wait "$p" || status=1; done
seen=()
for ((i = 0; i < jobs; i++)); do
  id=$(sed -n 's/^job \([^ ]*\).*/\1/p' "$run/job$i.out" | head -1)
  [[ -n "$id" ]] || { cat "$run/job$i.out"; keep=1; fail "job $i was not posted"; }
  log=$("$bin" -d "$run/renter" job logs "$id")
  echo "--- job $i ($id):"
  echo "$log" | sed 's/^/    /'
  n=$(echo "$log" | grep -c '^GPU ' || true)
  (( n == 1 )) || { echo "gpu-check: job $i saw $n devices, want exactly 1"; status=1; }
  dev=$(echo "$log" | sed -n 's/^GPU [0-9]*: .*(UUID: \(.*\))$/\1/p' | head -1)
  seen+=("$dev")
  echo "    telemetry:"
  "$bin" -d "$run/renter" job status --json "$id" | grep -E '"(gpu_util|temp_c|power_w|mem_used_mb|uuid|gpu_uuids)"' | sed 's/^/      /' || true
done
dups=$(printf '%s\n' "${seen[@]}" | sort | uniq -d)
[[ -z "$dups" ]] || { echo "gpu-check: devices seen by more than one job: $dups"; status=1; }
if (( status != 0 )); then keep=1; fail "FAILED"; fi
echo "gpu-check: OK: $jobs job(s), each on its own device"
