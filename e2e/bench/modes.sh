#!/usr/bin/env bash
# modes.sh — issue 6's whole-process experiment: sentry pinned to one core
# (taskset + GOMAXPROCS=1) and flooded far beyond what the farm takes, in
# forced batch, forced threshold and auto mode, one after the other.
#
# For each mode it prints, from sentry's own /metrics sampled every second:
# requests handled per second (admitted + rejected), the mode in force, and
# RSS; then wrk's overall latency (rejections dominate: p99 ≈ reject p99).
#
#   bash e2e/bench/modes.sh            # 15 s per mode
#   DURATION=30 bash e2e/bench/modes.sh
#   MODES=auto DURATION=60 bash e2e/bench/modes.sh   # memory over a minute
#
# Loopback only; each run is bounded by DURATION; everything is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${DURATION:-15}
# wrk is closed loop; with this many connections (each waiting at most a
# class period) it offers far more than one core can batch-process, which
# is the flood the experiment needs.
CONNS=${CONNS:-4000}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
OUT=${OUT:-e2e/bench/out}
mkdir -p "$OUT"
need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need taskset; then
  apt-get update -qq && apt-get install -y -qq wrk util-linux >/dev/null
fi
go build -o "$OUT/sentry" ./cmd/sentry
go build -o "$OUT/farm" ./e2e/cmd/farm
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

ncpu=$(nproc)
SENTRY_CPU=0
LOAD_CPU=$(( ncpu > 1 ? 1 : 0 ))

# Farm: 2 servers × 8 slots × 20 ms = 800 req/s of capacity, on the load core.
taskset -c "$LOAD_CPU" "$OUT/farm" -listen 127.0.0.1:17100 -servers 2 -slots 8 -service 20ms -log-level warn >"$tmp/farm.addrs" 2>"$tmp/farm.log" &
pids+=($!)
for _ in $(seq 50); do [ "$(wc -l <"$tmp/farm.addrs")" -ge 2 ] && break; sleep 0.1; done
backends=$(paste -sd, "$tmp/farm.addrs")

cat >"$tmp/req.lua" <<'LUA'
local paths = {"/checkout/pay", "/search?q=1", "/", "/", "/"}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1])
end
LUA

run_mode() {
  local mode=$1 port=$2 admin=$3
  cat >"$tmp/$mode.yaml" <<YAML
admin: {listen: 127.0.0.1:$admin}
log: {level: warn}
apps:
  - name: flood
    listen: 127.0.0.1:$port
    backends: {static: [${backends}]}
    classes:
      - {name: gold, period: 20ms, rules: [{path_prefix: /checkout/}]}
      - {name: silver, period: 50ms, rules: [{path: /search}]}
      - {name: bronze, period: 100ms, default: true}
    sla: {targets: [{target: 500ms}]}
    admission:
      mode: $mode
      batch: {parallelism: 8}
      threshold: {capacity: 0.8}
      switch: {cpu_high: 0.85, cpu_low: 0.6, hold: 2s, revert_after: 30s}
YAML
  "$OUT/sentry" check -config "$tmp/$mode.yaml" >/dev/null
  GOMAXPROCS=1 taskset -c "$SENTRY_CPU" "$OUT/sentry" run -config "$tmp/$mode.yaml" 2>"$tmp/$mode.log" &
  local spid=$!
  pids+=($spid)
  for _ in $(seq 50); do curl -fs "127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  total() { curl -fs "127.0.0.1:$admin/metrics" | awk '/^sentry_requests_total/ {s += $2} END {printf "%d", s}'; }
  cur_mode() { curl -fs "127.0.0.1:$admin/metrics" | awk '/^sentry_admission_mode\{/ && $2 == 1 {match($0, /mode="[a-z]+"/); print substr($0, RSTART+6, RLENGTH-7)}'; }
  cpu() { curl -fs "127.0.0.1:$admin/metrics" | awk '/^sentry_cpu_utilization_ratio\{/ {printf "%.2f", $2; f=1} END {if (!f) printf "-"}'; }
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency -s "$tmp/req.lua" "http://127.0.0.1:$port" >"$tmp/$mode.wrk" 2>&1 &
  local wpid=$!
  local prev; prev=$(total)
  local series=""
  for s in $(seq "$DURATION"); do
    sleep 1
    local now; now=$(total)
    local rss; rss=$(awk '/VmRSS/ {print $2}' "/proc/$spid/status")
    series+="$s $((now - prev)) $(cur_mode) ${rss} $(cpu)\n"
    prev=$now
  done
  wait "$wpid" || true
  # p99 of rejections from sentry's own histogram (upper bucket bound).
  local rp99; rp99=$(curl -fs "127.0.0.1:$admin/metrics" | awk '
    /^sentry_request_duration_seconds_bucket\{.*result="rejected"/ {
      match($0, /le="[^"]+"/); le = substr($0, RSTART+4, RLENGTH-5); n++; les[n] = le; cnt[n] = $2 }
    END { total = cnt[n]; if (total == 0) { print "n/a"; exit }
      for (i = 1; i <= n; i++) if (cnt[i] >= 0.99 * total) { printf "%s s", les[i]; exit } }')
  kill "$spid"; wait "$spid" 2>/dev/null || true
  echo "== mode $mode: second, handled/s, mode in force, RSS KiB, sentry CPU (fraction of its one core)"
  printf "$series" | awk '{printf "  %3d %7d %-9s %6d %s\n", $1, $2, $3, $4, $5}'
  # Steady: the seconds after the first third while wrk was still sending.
  local steady; steady=$(printf "$series" | awk -v d="$DURATION" '$1 > d/3 && $2 > 0 {s += $2; n++} END {printf "%d", (n ? s/n : 0)}')
  local p99; p99=$(awk '/ 99%/ {print $2}' "$tmp/$mode.wrk")
  local rs; rs=$(awk '/Requests\/sec/ {print $2}' "$tmp/$mode.wrk")
  local switched; switched=$(printf "$series" | awk '$3 == "threshold" {print $1; exit}')
  local saturated; saturated=$(printf "$series" | awk '$5 != "-" && $5 >= 0.85 {print $1; exit}')
  [ "$mode" = auto ] && echo "  CPU first at or above cpu_high (0.85) in second ${saturated:-never}; threshold mode first seen in second ${switched:-never} (hold 2s; seconds are 1 s samples)"
  echo "  steady handled/s (last 2/3): $steady; wrk req/s $rs; wrk p99 (all) $p99; reject p99 (sentry) ${rp99}; first second in threshold: ${switched:-never}"
  printf "%s %s %s %s %s %s\n" "$mode" "$steady" "$rs" "$p99" "$rp99" "${switched:-never}" >>"$tmp/summary"
}

MODES=${MODES:-batch threshold auto}
for m in $MODES; do
  case $m in
    batch) run_mode batch 17201 17301 ;;
    threshold) run_mode threshold 17202 17302 ;;
    auto) run_mode auto 17203 17303 ;;
    *) echo "unknown mode $m" >&2; exit 2 ;;
  esac
done
echo
echo "| mode | steady handled/s | wrk req/s | wrk p99 (all) | reject p99 (sentry histogram, bucket bound) | first second in threshold |"
echo "|---|--:|--:|--:|--:|--:|"
awk '{printf "| %s | %s | %s | %s | %s %s | %s |\n", $1, $2, $3, $4, $5, $6, $7}' "$tmp/summary" | tee "$OUT/modes.md"
