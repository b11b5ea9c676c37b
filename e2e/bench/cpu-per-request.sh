#!/usr/bin/env bash
# cpu-per-request.sh PID URL [SECONDS] — requests served per CPU-second of
# one process (PID) under wrk -t1 -c32 against URL. Steadier than req/s on
# a shared machine; used to compare sentry's reject and relay paths with a
# plain fasthttp server (e2e/bench/backend) side by side:
#
#   go build -o /tmp/backend ./e2e/bench/backend && /tmp/backend -listen 127.0.0.1:18480 &
#   go build -o /tmp/sentry ./cmd/sentry && /tmp/sentry run -listen 127.0.0.1:18481 -backend 127.0.0.1:18480 -admin 127.0.0.1:18491 &
#   bash e2e/bench/cpu-per-request.sh "$(pgrep -f 'backend -listen')" http://127.0.0.1:18480/
#   bash e2e/bench/cpu-per-request.sh "$(pgrep -f 'sentry run')" http://127.0.0.1:18481/
#
# Use ports below 32768: the kernel's ephemeral range can hold a port a
# listener wants while wrk's connections are open.
set -euo pipefail
pid=$1 url=$2 secs=${3:-5}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
out=$(wrk -t1 -c32 -d"${secs}s" "$url" 2>&1)
t1=$(ticks)
reqs=$(awk '/requests in/ {print $1}' <<<"$out")
rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
awk -v r="$reqs" -v a="$t0" -v b="$t1" -v hz="$hz" -v rps="$rps" -v n="${non2xx:-0}" 'BEGIN {
  cpu = (b - a) / hz
  printf "req/s %s, requests %d, CPU %.2f s, requests per CPU-second %d, non-2xx %d\n", rps, r, cpu, (cpu > 0 ? r / cpu : 0), n }'
