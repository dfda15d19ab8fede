#!/usr/bin/env bash
# GPU host check: on a machine with NVIDIA GPUs, start a provider (real NVML
# inventory), a renter and an observer on loopback, and check what only real
# hardware shows:
#   1. NVML's device names map to canonical catalogue models;
#   2. one concurrent 1-GPU job per device: each sees exactly one device,
#      no two jobs the same one (CUDA_VISIBLE_DEVICES and nvidia-smi -L);
#   3. a job computing on its GPU (PyTorch, where the host has it) is seen
#      in the renter's verified heartbeats: utilisation and memory of the
#      leased device;
#   4. `gpumesh verify` challenges every device (seeded matrix product on
#      the device through CUDA, checked by Freivalds, timed against the
#      model's rate): each must be verified;
#   5. the verdicts reach the observer's reputation book by gossip;
#   6. device memory is scrubbed between leases: a tenant's marker left in
#      GPU memory is not found by the next tenant;
#   7. MIG: the daemon's MIG mode and instances of each device match
#      nvidia-smi's ("absent" where the device has no MIG); where a device
#      is in MIG mode with instances, a --isolation mig slice job sees
#      exactly one of them, never the device;
#   8. MPS: device 0 is sold in quarters; its record says they are enforced
#      by mps exactly when an MPS control daemon serves the host, and a
#      quarter job then runs with its slice's MPS limits (none otherwise).
#      The check starts no MPS daemon and changes no MIG mode.
# Writes a report (date, GPU, driver, each check) to $GPUMESH_GPU_CHECK_REPORT
# (default testnet/gpu-check.md) and the daemons' logs to
# $GPUMESH_GPU_CHECK_LOGS when set.
#
#   testnet/gpu-check.sh            # all devices
#   GPUMESH_GPU_CHECK_JOBS=3 testnet/gpu-check.sh
#
# Uses bin/gpumesh, building it first where Go is installed. Exits 1 with
# "no NVIDIA GPU found" on a machine without one.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
fail() { echo "gpu-check: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || fail "no NVIDIA GPU found (nvidia-smi -L fails or is absent)"
devices=$(nvidia-smi -L | grep -c '^GPU ')
(( devices > 0 )) || fail "no NVIDIA GPU found"
# A device in MIG mode is sold as its instances, not whole: the 1-GPU jobs
# go to the others.
mig_on=$(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | grep -c Enabled || true)
jobs="${GPUMESH_GPU_CHECK_JOBS:-$((devices - mig_on))}"
report="${GPUMESH_GPU_CHECK_REPORT:-$root/testnet/gpu-check.md}"
logs="${GPUMESH_GPU_CHECK_LOGS:-}"
echo "gpu-check: $devices device(s):"
nvidia-smi -L

bin="$root/bin/gpumesh"
if command -v go >/dev/null 2>&1; then
  (cd "$root" && CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/gpumesh ./cmd/gpumesh) || fail "build failed"
fi
[[ -x "$bin" ]] || fail "no $bin and no Go to build it"
run="$(mktemp -d /tmp/gpumesh-gpu-check.XXXXXX)"
chmod 755 "$run"
pids=()
results=()
status=0
check() { # check NAME OK|FAIL DETAIL
  results+=("| $1 | $2 | $3 |")
  echo "gpu-check: [$2] $1: $3"
  [[ "$2" == OK || "$2" == SKIP ]] || status=1
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "$logs" ]]; then cp "$run"/*.log "$logs"/ 2>/dev/null || true; fi
  rm -rf "$run"
}
trap cleanup EXIT
port="${GPUMESH_GPU_CHECK_PORT:-4700}"

mkdir -p "$run/renter" "$run/provider" "$run/observer"
for n in renter observer; do
  p=$port; [[ $n == observer ]] && p=$((port + 2))
  cat >"$run/$n/config.yaml" <<CFG
region: local
listen: [/ip4/127.0.0.1/tcp/$p]
provider:
  heartbeat_interval: 1s
CFG
done
cat >"$run/provider/config.yaml" <<CFG
region: local
listen: [/ip4/127.0.0.1/tcp/$((port + 1))]
provider:
  enabled: true
  gpu_source: nvml
  executor: process
  heartbeat_interval: 1s
  advertise_ttl: 1m
  policy: {price_floor: 0.01, accept_preemptible: true, slices: [{devices: [0], count: 4}]}
CFG
g() { local n=$1; shift; "$bin" -d "$run/$n" "$@"; }
wait_up() { for _ in $(seq 100); do g "$1" status >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
g renter daemon >"$run/renter.log" 2>&1 & pids+=($!)
wait_up renter || fail "renter did not start: $(tail -5 "$run/renter.log")"
rpeer=$(g renter status --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')
boot="/ip4/127.0.0.1/tcp/$port/p2p/$rpeer"
g provider daemon --bootstrap "$boot" >"$run/provider.log" 2>&1 & pids+=($!)
g observer daemon --bootstrap "$boot" >"$run/observer.log" 2>&1 & pids+=($!)
wait_up provider || fail "provider did not start: $(tail -5 "$run/provider.log")"
wait_up observer || fail "observer did not start"
ppeer=$(g provider status --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')
g provider status | sed 's/^/  provider: /'
echo "gpu-check: waiting for the provider's capability record"
for _ in $(seq 60); do g renter providers --json | grep -q '"peer"' && break; sleep 1; done
g renter providers | tee "$run/providers.txt"

# 1. NVML names → canonical models.
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
names=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd, -)
canon=$(g provider status --json | sed -n 's/.*"model": *"\([^"]*\)".*/\1/p' | sort -u | paste -sd, -)
if g renter providers --json | grep -q '"detected": *true'; then
  check "NVML inventory" OK "driver $driver; $names; status models: ${canon:-?}"
else
  check "NVML inventory" FAIL "the provider's record has no detected GPU"
fi

# 2. Concurrent 1-GPU jobs, one device each.
echo "gpu-check: posting $jobs concurrent 1-GPU job(s)"
job_cmd='echo "CVD=$CUDA_VISIBLE_DEVICES"; nvidia-smi -L; sleep 5'
posts=()
for ((i = 0; i < jobs; i++)); do
  timeout 90 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 1 --duration 2m --wait -- sh -c "$job_cmd" \
    >"$run/job$i.out" 2>&1 &
  posts+=($!)
done
jobs_ok=1
for p in "${posts[@]}"; do wait "$p" || jobs_ok=0; done
seen=()
for ((i = 0; i < jobs; i++)); do
  id=$(sed -n 's/^job \([^ ]*\).*/\1/p' "$run/job$i.out" | head -1)
  [[ -n "$id" ]] || { cat "$run/job$i.out"; jobs_ok=0; continue; }
  log=$(g renter job logs "$id")
  echo "--- job $i ($id):"; echo "$log" | sed 's/^/    /'
  n=$(echo "$log" | grep -c '^GPU ' || true)
  (( n == 1 )) || { echo "gpu-check: job $i saw $n devices, want exactly 1"; jobs_ok=0; }
  seen+=("$(echo "$log" | sed -n 's/^GPU [0-9]*: .*(UUID: \(.*\))$/\1/p' | head -1)")
done
dups=$(printf '%s\n' "${seen[@]}" | sort | uniq -d)
[[ -z "$dups" ]] || { echo "gpu-check: devices seen by more than one job: $dups"; jobs_ok=0; }
if (( jobs_ok )); then check "one device per lease" OK "$jobs job(s), each saw exactly its own device"; else check "one device per lease" FAIL "see the job output above"; fi

# 4. GPU challenge on every device.
echo "gpu-check: gpumesh verify $ppeer"
timeout 120 "$bin" -d "$run/renter" verify "$ppeer" 2>&1 | tee "$run/verify.txt"
nver=$(grep -c ': verified' "$run/verify.txt" || true)
line=$(head -1 "$run/verify.txt")
if (( nver == devices )); then check "GPU challenge" OK "$nver/$devices verified: $line"; else check "GPU challenge" FAIL "$nver/$devices verified: $line"; fi

# 5. The verdicts reach another node's reputation book.
got=""
for _ in $(seq 30); do
  got=$(g observer reputation "$ppeer" | grep '^gpu ' || true)
  [[ -n "$got" ]] && break
  sleep 1
done
if [[ -n "$got" ]]; then check "verdict gossiped" OK "observer: $got"; else check "verdict gossiped" FAIL "the observer's book has no verdict"; fi

# 3. Telemetry while a job computes on its GPU.
py=""
for c in python3 /opt/torch/.venv/bin/python3; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then py=$(command -v "$c"); break; fi
done
if [[ -n "$py" ]]; then
  compute="import torch,time; x=torch.randn(8192,8192,device='cuda'); t=time.time()
while time.time()-t<12: y=x@x
torch.cuda.synchronize(); print('computed on', torch.cuda.get_device_name(0), torch.cuda.device_count(), 'device(s) visible')"
  timeout 120 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 1 --duration 2m --wait -- "$py" -c "$compute" >"$run/compute.out" 2>&1
  id=$(sed -n 's/^job \([^ ]*\).*/\1/p' "$run/compute.out" | head -1)
  g renter job logs "$id" 2>&1 | tail -3 | sed 's/^/    /'
  st=$(g renter job status --json "$id")
  util=$(echo "$st" | sed -n 's/.*"mean_gpu_util": *\([0-9.]*\).*/\1/p' | head -1)
  mem=$(echo "$st" | grep -o '"mem_used_mb": *[0-9]*' | grep -o '[0-9]*$' | sort -n | tail -1)
  echo "$st" | grep -E '"(gpu_util|mean_gpu_util|temp_c|max_temp_c|power_w|mem_used_mb|uuid)"' | sed 's/^/      /' | head -20
  if awk -v u="${util:-0}" 'BEGIN{exit !(u > 0)}'; then
    check "telemetry while computing" OK "mean GPU utilisation ${util}% over the lease, memory up to ${mem:-?} MB in the last heartbeat"
  else
    check "telemetry while computing" FAIL "mean GPU utilisation ${util:-none} in the renter's verified heartbeats"
  fi
else
  check "telemetry while computing" SKIP "no python3 with CUDA PyTorch on this host"
fi


# 6. GPU memory is scrubbed between tenants: one job fills device memory
#    with a marker and exits; after its lease the provider zeroes the
#    device; a second job reads uninitialised device memory and must not
#    find the marker.
if [[ -n "$py" ]]; then
  fill="import torch; m=0x5ca1ab1e; x=torch.full((1<<30,), m, dtype=torch.int32, device='cuda'); torch.cuda.synchronize(); print('filled', x.numel()*4>>20, 'MiB')"
  look="import torch; m=0x5ca1ab1e; y=torch.empty((1<<30,), dtype=torch.int32, device='cuda'); n=int((y==m).sum()); print('marker words found:', n)"
  timeout 120 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 1 --duration 2m --wait -- "$py" -c "$fill" >"$run/fill.out" 2>&1
  timeout 120 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 1 --duration 2m --wait -- "$py" -c "$look" >"$run/look.out" 2>&1
  found=$(sed -n 's/.*marker words found: \([0-9]*\).*/\1/p' "$run/look.out" | tail -1)
  scrubbed=$(g provider counters --json 2>/dev/null | sed -n 's/.*"provider.gpu_scrubbed": *\([0-9]*\).*/\1/p')
  if [[ "${found:-x}" == 0 && "${scrubbed:-0}" -ge 1 ]]; then
    check "GPU memory scrubbed" OK "$scrubbed lease(s) scrubbed; the next tenant found 0 marker words in 4 GiB of uninitialised memory"
  else
    check "GPU memory scrubbed" FAIL "scrubbed ${scrubbed:-0} lease(s); marker words found by the next tenant: ${found:-unknown} ($(tail -1 "$run/look.out"))"
  fi
else
  check "GPU memory scrubbed" SKIP "no python3 with CUDA PyTorch on this host"
fi

# 7. MIG: the daemon's view of each device against nvidia-smi's, then a
#    slice job on a device in MIG mode with instances.
st=$(g provider status)
smi_migs=$(nvidia-smi -L | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p' | sort | paste -sd' ' -)
daemon_migs=$(echo "$st" | sed -n 's/^  mig [0-9.]*: .* \(MIG-[^ ]*\)$/\1/p' | sort | paste -sd' ' -)
mig_ok=1
mig_detail=""
while IFS=', ' read -r idx mode; do
  [[ -n "$idx" ]] || continue
  case "$mode" in
    Enabled) want="MIG: enabled" ;;
    Disabled) want="MIG: disabled" ;;
    *) want="MIG: absent" ;; # [N/A]: the device has no MIG
  esac
  line=$(echo "$st" | grep "^gpu $idx: " || true)
  if [[ "$line" == *"$want"* ]]; then
    mig_detail+="gpu $idx ${want#MIG: }; "
  else
    mig_ok=0
    mig_detail+="gpu $idx: nvidia-smi says $mode, the daemon: ${line:-nothing}; "
  fi
done < <(nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader 2>/dev/null)
if [[ "$smi_migs" != "$daemon_migs" ]]; then
  mig_ok=0
  mig_detail+="instances differ: nvidia-smi [${smi_migs}], daemon [${daemon_migs}]; "
fi
# The first device in MIG mode sold in slices: 2, 4 or 8 instances.
mig_dev=""
mig_n=0
for d in $(echo "$st" | sed -n 's/^gpu \([0-9]*\): .*MIG: enabled.*/\1/p'); do
  n=$(echo "$st" | grep -c "^  mig $d\." || true)
  if [[ $n == 2 || $n == 4 || $n == 8 ]]; then mig_dev=$d; mig_n=$n; break; fi
done
if (( mig_ok )) && [[ -n "$mig_dev" ]]; then
  frac=$(awk -v n="$mig_n" 'BEGIN{printf "%g", 1/n}')
  mig_job='echo "CVD=$CUDA_VISIBLE_DEVICES"'
  [[ -n "$py" ]] && mig_job+="; $py -c 'import torch; print(\"visible:\", torch.cuda.device_count())'"
  timeout 120 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count "$frac" --isolation mig --duration 2m --wait -- sh -c "$mig_job" >"$run/mig.out" 2>&1
  id=$(sed -n 's/^job \([^ ]*\).*/\1/p' "$run/mig.out" | head -1)
  log=$(g renter job logs "$id" 2>&1)
  echo "$log" | sed 's/^/    /'
  cvd=$(echo "$log" | sed -n 's/^CVD=//p' | head -1)
  vis=$(echo "$log" | sed -n 's/^visible: //p' | head -1)
  if [[ "$cvd" == MIG-* && " $daemon_migs " == *" $cvd "* && "${vis:-1}" == 1 ]]; then
    mig_detail+="a $frac --isolation mig job saw only its instance $cvd${vis:+ (CUDA: $vis device)}"
  else
    mig_ok=0
    mig_detail+="a $frac --isolation mig job saw CUDA_VISIBLE_DEVICES=${cvd:-nothing}${vis:+, $vis CUDA device(s)} ($(tail -1 "$run/mig.out"))"
  fi
elif (( mig_ok )); then
  mig_detail+="no device in MIG mode with 2, 4 or 8 instances: no slice job run"
fi
if (( mig_ok )); then check "MIG" OK "$mig_detail"; else check "MIG" FAIL "$mig_detail"; fi

# 8. MPS: device 0's quarters are enforced by mps exactly when an MPS
#    control daemon serves the host (its control pipe), else by none.
pipes="${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}"
if [[ -p "$pipes/control" || -S "$pipes/control" ]]; then want_iso=mps; else want_iso=none; fi
iso=$(g renter providers --json | grep -o '"isolation": *"[a-z]*"' | head -1 | grep -o '[a-z]*"$' | tr -d '"')
if echo "$st" | grep -q '^gpu 0: .*MIG: enabled'; then
  check "MPS" SKIP "device 0 is in MIG mode: its slices are MIG instances (isolation ${iso:-?})"
elif [[ "$iso" != "$want_iso" ]]; then
  check "MPS" FAIL "device 0's slices advertised as enforced by ${iso:-nothing}, want $want_iso (MPS control pipe in $pipes: $want_iso)"
else
  ask=any
  [[ $want_iso == mps ]] && ask=mps
  timeout 120 "$bin" -d "$run/renter" job post --tier gold --max-price 10 --count 0.25 --isolation "$ask" --duration 2m --wait -- \
    sh -c 'echo "MPS=${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT:-unset}/${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-unset}"' >"$run/mps.out" 2>&1
  id=$(sed -n 's/^job \([^ ]*\).*/\1/p' "$run/mps.out" | head -1)
  got=$(g renter job logs "$id" 2>&1 | sed -n 's/^MPS=//p' | head -1)
  if [[ $want_iso == mps && "$got" == 0=*M/25 ]] || [[ $want_iso == none && "$got" == unset/unset ]]; then
    check "MPS" OK "device 0's quarters enforced by $iso; a quarter job's MPS limits: $got"
  else
    check "MPS" FAIL "device 0's quarters enforced by $iso, but a quarter job's MPS limits were ${got:-not printed} ($(tail -1 "$run/mps.out"))"
  fi
fi

{
  echo "# gpu-check on a real GPU host"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | paste -sd';' -)"
  echo "- driver: $driver, CUDA $(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
  echo "- gpumesh: $("$bin" version 2>/dev/null | head -1)"
  echo
  echo "| check | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${results[@]}"
  echo
  echo '```'
  cat "$run/verify.txt"
  echo '```'
} >"$report"
echo "gpu-check: report in $report"
(( status == 0 )) || fail "FAILED"
echo "gpu-check: OK"
