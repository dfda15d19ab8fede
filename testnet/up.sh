#!/usr/bin/env bash
# Start a local gpumesh network of N daemons on loopback (default 5).
# Node 0 is a renter and the bootstrap peer; nodes 1..N-1 are providers with
# a varied declared GPU inventory, regions, prices and policies.
# State lives in testnet/run/ (one data dir per node); stop with testnet/down.sh.
# GPUMESH_ADVERTISE_TTL sets the providers' advertise_ttl (default 1m, so
# that a stopped provider leaves discovery quickly; the daemon's own default
# is 10m).
# GPUMESH_TESTNET_METRICS=1 gives node i a metrics listener (Prometheus and
# /debug/pprof/) on 127.0.0.1:(port base + 1000 + i), for profiling.
# GPUMESH_TESTNET_GPUS=K gives every provider K identical A100 80GB GPUs
# (eu-west, floor 1.20, always available) instead of the varied inventory:
# a uniform net for benchmarks (10 providers x 2 = 20 slots).
# GPUMESH_TESTNET_RENTERS=R makes nodes 0..R-1 renters (no GPUs), the rest
# providers: several users posting at once.
# GPUMESH_TESTNET_RENTER_YAML adds its lines to each renter's config.yaml
# (for example "max_bidders: -1"), for experiments.
# GPUMESH_TESTNET_PROCS=P runs each daemon with GOMAXPROCS=P (default 1:
# the daemons share this machine as separate machines of one core would).
set -euo pipefail
umask 077 # data dirs, configs and daemon logs readable by this user only
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
n="${1:-5}"
[[ "$n" =~ ^[0-9]+$ ]] && (( n >= 2 && n <= 200 )) || { echo "usage: $0 [N in 2..200]" >&2; exit 2; }
if [[ -n "${GPUMESH_TESTNET_GPUS:-}" && ! "$GPUMESH_TESTNET_GPUS" =~ ^[1-9][0-9]?$ ]]; then
  echo "GPUMESH_TESTNET_GPUS: want 1..99 GPUs per provider" >&2; exit 2
fi
procs="${GPUMESH_TESTNET_PROCS:-1}"
[[ "$procs" =~ ^[1-9][0-9]*$ ]] || { echo "GPUMESH_TESTNET_PROCS: want the scheduler threads of each daemon, 1 or more" >&2; exit 2; }
renters="${GPUMESH_TESTNET_RENTERS:-1}"
[[ "$renters" =~ ^[0-9]+$ ]] && (( renters >= 1 && renters < n )) || { echo "GPUMESH_TESTNET_RENTERS: want 1..$((n - 1)) renters" >&2; exit 2; }
run="${GPUMESH_TESTNET_DIR:-$here/run}"
bin="$root/bin/gpumesh"
base_port="${GPUMESH_TESTNET_PORT:-4300}"
if [[ ! -x "$bin" ]]; then
  (cd "$root" && CGO_CFLAGS=-Wno-deprecated-declarations go build -o bin/gpumesh ./cmd/gpumesh)
fi
if [[ -f "$run/pids" ]]; then
  "$here/down.sh" >/dev/null 2>&1 || true
fi
rm -rf "$run"
mkdir -p "$run"

# Inventory and policy per provider, cycled: model vram count region floor preemptible extra-policy
profiles=(
  "H100 80 2 eu-west 2.10 false"
  "A100 40 1 eu-central 1.20 true"
  "RTX4090 24 1 us-east 0.45 true nights"
  "A100 80 4 us-west 1.40 true"
  "L4 24 2 ap-south 0.35 true"
  "H100 80 8 us-east 1.95 false peak"
  "RTX4090 24 2 eu-west 0.50 true weekends"
  "A100 40 2 eu-west 1.10 true"
)
if [[ -n "${GPUMESH_TESTNET_GPUS:-}" ]]; then
  profiles=("A100 80 $GPUMESH_TESTNET_GPUS eu-west 1.20 true")
fi

metrics_line() { # idx
  [[ -n "${GPUMESH_TESTNET_METRICS:-}" ]] && printf 'metrics_addr: 127.0.0.1:%d\nmetrics_pprof: true\n' "$((base_port + 1000 + $1))"
  return 0
}

write_config() { # idx
  local i=$1
  local -a p
  read -r -a p <<<"${profiles[$(( (i - 1) % ${#profiles[@]} ))]}"
  local model=${p[0]} vram=${p[1]} count=${p[2]} region=${p[3]} floor=${p[4]} pre=${p[5]} extra=${p[6]:-}
  {
    echo "region: $region"
    echo "listen: [/ip4/127.0.0.1/tcp/$((base_port + i)), /ip4/127.0.0.1/udp/$((base_port + i))/quic-v1]"
    echo "log_level: info"
    metrics_line "$i"
    echo "provider:"
    echo "  enabled: true"
    echo "  advertise_ttl: ${GPUMESH_ADVERTISE_TTL:-1m}"
    echo "  heartbeat_interval: 2s"
    echo "  preempt_grace: 3s"
    echo "  executor: auto"
    echo "  gpu_source: declared"
    echo "  gpus:"
    for ((g = 0; g < count; g++)); do echo "    - {model: $model, vram_gb: $vram}"; done
    echo "  datasets: [imagenet-$(( i % 3 ))]"
    echo "  policy:"
    echo "    price_floor: $floor"
    echo "    accept_preemptible: $pre"
    echo "    allow_preemption: true"
    echo "    occupancy_surcharge: 0.2"
    case "$extra" in
      nights) echo "    availability: [{from: \"20:00\", to: \"08:00\"}]" ;;
      weekends) echo "    availability: [{days: [sat, sun], from: \"00:00\", to: \"24:00\"}, {from: \"18:00\", to: \"09:00\"}]" ;;
      peak) echo "    peak_windows: [{days: [mon, tue, wed, thu, fri], from: \"09:00\", to: \"18:00\"}]"
            echo "    peak_multiplier: 1.5" ;;
    esac
  } >"$run/node$i/config.yaml"
}

start() { # idx [bootstrap]
  local i=$1
  local dir="$run/node$i"
  local args=(-d "$dir" daemon)
  [[ -n "${2:-}" ]] && args+=(--bootstrap "$2")
  # Every daemon here shares this machine with the others, as if each had
  # a machine of its own with one core: one Go scheduler thread each
  # (GOMAXPROCS), not one per core of the shared machine, where N daemons'
  # schedulers spun and handed goroutines between threads competing for
  # the same cores (11 daemons on 2 cores: 16 % more CPU a job).
  GOMAXPROCS="$procs" nohup "$bin" "${args[@]}" >"$dir/daemon.log" 2>&1 &
  echo "$! node$i" >>"$run/pids"
}

wait_ready() { # idx
  # Many daemons starting at once on few cores take a while: 30 s each.
  for _ in $(seq 1 300); do
    "$bin" -d "$run/node$1" status >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "node$1 did not start; see $run/node$1/daemon.log" >&2
  tail -5 "$run/node$1/daemon.log" >&2 || true
  return 1
}

write_renter_config() { # idx
  local i=$1
  cat >"$run/node$i/config.yaml" <<CFG
region: eu-west
listen: [/ip4/127.0.0.1/tcp/$((base_port + i)), /ip4/127.0.0.1/udp/$((base_port + i))/quic-v1]
log_level: info
$(metrics_line "$i")
provider:
  heartbeat_interval: 2s   # what this renter expects from its providers
${GPUMESH_TESTNET_RENTER_YAML:-}
CFG
}

mkdir -p "$run/node0"
write_renter_config 0
start 0
wait_ready 0
boot="/ip4/127.0.0.1/tcp/$base_port/p2p/$("$bin" -d "$run/node0" status --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')"
echo "$boot" >"$run/bootstrap"
for ((i = 1; i < n; i++)); do
  mkdir -p "$run/node$i"
  if (( i < renters )); then write_renter_config "$i"; else write_config "$i"; fi
  start "$i" "$boot"
done
for ((i = 1; i < n; i++)); do wait_ready "$i"; done
echo "gpumesh testnet: $n nodes up (data dirs in $run, bootstrap $boot)"
echo "  renter CLI:  bin/gpumesh -d $run/node0 <command>"
echo "  stop:        testnet/down.sh"
