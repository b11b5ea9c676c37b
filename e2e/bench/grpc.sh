#!/usr/bin/env bash
# grpc.sh — gRPC unary through a proxy, side by side: sentry against nginx
# (grpc_pass) and HAProxy, all on loopback in front of one grpc-go echo
# backend (e2e/cmd/grpcload -serve, 128-byte replies), with the backend
# alone as the ceiling. HTTP/2 cleartext with prior knowledge (h2c) on both
# sides of every proxy:
#
#   direct:  client -> backend
#   nginx:   listen ... http2;        grpc_pass grpc://backend
#   haproxy: bind ... proto h2;       server ... proto h2
#   sentry:  apps[].h2c: true;        backends.protocol: h2c
#
# The load is e2e/cmd/grpcload: CONNS connections, STREAMS unary calls in
# flight on each (closed loop), WARMUP seconds then DURATION measured.
#
# Usage:
#   bash e2e/bench/grpc.sh [--quick] [--out DIR]
#
# Environment:
#   DURATION  seconds per measured run     (default 10; --quick sets 3)
#   CONNS     client connections           (default 16)
#   STREAMS   calls in flight per conn     (default 10)
#   PEERS     peers, in this order         (default "direct nginx haproxy sentry";
#             also "sentry-off": sentry with admission mode off, to see
#             what admission costs per call)
#   OUT       output dir                   (default e2e/bench/out-grpc)
#
# Every peer runs alone, in its own process group, and is stopped (and its
# port seen free again) before the next starts; a trap stops whatever is
# left on any exit. Every port is checked free before the run and again
# before the report.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DURATION=${DURATION:-10}
CONNS=${CONNS:-16}
STREAMS=${STREAMS:-10}
PEERS=${PEERS:-"direct nginx haproxy sentry"}
OUT=${OUT:-$ROOT/e2e/bench/out-grpc}
WARMUP=1
READY_WAIT=10

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) DURATION=3 ;;
	--out) OUT=$2; shift ;;
	--out=*) OUT=${1#--out=} ;;
	-h | --help) sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "grpc.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
	esac
	shift
done
for v in DURATION CONNS STREAMS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "grpc.sh: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
for p in $PEERS; do
	case "$p" in direct | nginx | haproxy | sentry | sentry-off) ;;
	*) echo "grpc.sh: unknown peer '$p' (known: direct nginx haproxy sentry sentry-off)" >&2; exit 2 ;;
	esac
done

HOST=127.0.0.1
BACKEND_PORT=18190
declare -A PORT=([direct]=18190 [nginx]=18191 [haproxy]=18192 [sentry]=18194 [sentry-off]=18194)
ADMIN_PORT=18195

# ---------------------------------------------------------------- cleanup
BENCH_TAG=grpc
# shellcheck source=e2e/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# wait_up NAME PGID PORT: bounded wait until PORT accepts connections.
wait_up() {
	local name=$1 pg=$2 port=$3 _
	for _ in $(seq $((READY_WAIT * 10))); do
		kill -0 "$pg" 2>/dev/null || { sed 's/^/    /' "$TMP/$name.log" >&2 || true; die "$name exited during start-up"; }
		port_free "$port" || return 0
		sleep 0.1
	done
	sed 's/^/    /' "$TMP/$name.log" >&2 || true
	die "$name did not listen on $port within ${READY_WAIT}s"
}
field() { tr ' ' '\n' <"$1" | awk -F= -v k="$2" '$1 == k { print $2 }'; }
# check_grpc NAME PORT: one connection's calls for a second all succeed.
check_grpc() {
	local out="$TMP/check-$1.txt"
	timeout 20 "$OUT/grpcload" -addr "$HOST:$2" -conns 1 -streams 1 -warmup 0s -duration 1s >"$out" 2>&1 ||
		{ cat "$out" >&2; die "$1: gRPC check failed"; }
	[ "$(field "$out" errors)" = 0 ] || { cat "$out" >&2; die "$1: gRPC check saw errors"; }
}

# ---------------------------------------------------------------- tools
need_tools $PEERS --

TMP=$(mktemp -d /tmp/sentry-grpc.XXXXXX)
mkdir -p "$OUT"
rm -f "$OUT"/load-*.txt "$OUT"/log-*.txt "$OUT"/grpc.md
OUT=$(cd "$OUT" && pwd)

log "building sentry and grpcload into $OUT"
if [[ " $PEERS " == *" sentry"* ]]; then
	(cd "$ROOT" && go build -o "$OUT/sentry" ./cmd/sentry) || die "go build ./cmd/sentry failed"
fi
(cd "$ROOT" && go build -o "$OUT/grpcload" ./e2e/cmd/grpcload) || die "go build ./e2e/cmd/grpcload failed"
ports_free $BACKEND_PORT "${PORT[@]}" $ADMIN_PORT

# ---------------------------------------------------------------- configs
write_nginx_conf() {
	mkdir -p "$TMP/nginx"
	# nginx 1.22 (Debian 12): "listen ... http2" on a plain port is h2c
	# with prior knowledge. keepalive_requests bounds requests per h2
	# connection (1.19.7+), client side and upstream side.
	cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
pid $TMP/nginx.pid;
error_log $TMP/nginx.error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    keepalive_requests 1000000;
    # grpc_pass sends one call per upstream connection at a time, so the
    # idle cache must hold every call in flight (CONNS x STREAMS), or
    # nginx opens a backend connection per call.
    upstream grpc_backend {
        server $HOST:$BACKEND_PORT;
        keepalive 1024;
        keepalive_requests 1000000;
    }
    server {
        listen $HOST:${PORT[nginx]} http2;
        location / {
            grpc_pass grpc://grpc_backend;
        }
    }
}
EOF
}
write_haproxy_conf() {
	cat >"$TMP/haproxy.cfg" <<EOF
global
    nbthread 2
    maxconn 4096
    pidfile $TMP/haproxy.pid
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 30s
frontend relay
    bind $HOST:${PORT[haproxy]} proto h2
    default_backend grpc_backend
backend grpc_backend
    server b1 $HOST:$BACKEND_PORT proto h2
EOF
}
# write_sentry_policy MODE: admission mode (auto, the default, or off).
write_sentry_policy() {
	cat >"$TMP/sentry.yaml" <<EOF
admin:
  listen: $HOST:$ADMIN_PORT
apps:
  - name: bench
    listen: $HOST:${PORT[sentry]}
    h2c: true
    backends:
      static: [$HOST:$BACKEND_PORT]
      protocol: h2c
    admission:
      mode: $1
EOF
}

# ---------------------------------------------------------------- load
RESULTS=() # "peer|rps|p50ms|p99ms|errors|ok|cpu"
WARNINGS=()
# bench PEER PORT SID (SID empty: no proxy CPU to measure)
bench() {
	local peer=$1 port=$2 sid=$3 out t0=0 t1=0 rc=0 cpu=n/a rps p50 p99 errs ok
	out="$TMP/load-$peer.txt"
	log "$peer: grpcload -conns $CONNS -streams $STREAMS -warmup ${WARMUP}s -duration ${DURATION}s -addr $HOST:$port"
	[ -n "$sid" ] && t0=$(cpu_ticks "$sid")
	timeout $((DURATION + WARMUP + 30)) "$OUT/grpcload" -addr "$HOST:$port" -conns "$CONNS" -streams "$STREAMS" \
		-warmup "${WARMUP}s" -duration "${DURATION}s" >"$out" 2>&1 &
	LOAD_PID=$!
	wait "$LOAD_PID" || rc=$?
	LOAD_PID=""
	[ "$rc" = 0 ] || { cat "$out" >&2; die "grpcload against $peer failed"; }
	if [ -n "$sid" ]; then
		t1=$(cpu_ticks "$sid")
		cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", d / hz }')
	fi
	rps=$(field "$out" rps); p50=$(field "$out" p50_ms); p99=$(field "$out" p99_ms)
	errs=$(field "$out" errors); ok=$(field "$out" ok)
	[ -n "$rps" ] && [ -n "$p99" ] && [ -n "$ok" ] || { cat "$out" >&2; die "could not parse grpcload's output for $peer"; }
	cp "$out" "$OUT/load-$peer.txt"
	[ "${errs:-0}" = 0 ] || WARNINGS+=("$peer: $errs calls failed (see $OUT/load-$peer.txt)")
	RESULTS+=("$peer|$rps|$p50|$p99|${errs:-0}|$ok|$cpu")
}

# ---------------------------------------------------------------- run
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "output: $OUT; ${DURATION}s per run; $CONNS conns x $STREAMS streams; peers: $PEERS"
start backend "$OUT/grpcload" -serve "$HOST:$BACKEND_PORT"
BACKEND_PG=$STARTED_PGID
wait_up backend "$BACKEND_PG" "$BACKEND_PORT"

for peer in $PEERS; do
	case "$peer" in
	direct)
		check_grpc direct "$BACKEND_PORT"
		bench direct "$BACKEND_PORT" ""
		continue
		;;
	nginx)
		write_nginx_conf
		nginx -t -q -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log" || die "nginx -t rejected $TMP/nginx.conf"
		start nginx nginx -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log"
		;;
	haproxy)
		write_haproxy_conf
		haproxy -c -q -f "$TMP/haproxy.cfg" || die "haproxy -c rejected $TMP/haproxy.cfg"
		start haproxy haproxy -db -f "$TMP/haproxy.cfg"
		;;
	sentry | sentry-off)
		mode=auto
		[ "$peer" = sentry-off ] && mode=off
		write_sentry_policy "$mode"
		"$OUT/sentry" check -config "$TMP/sentry.yaml" >&2 || die "sentry check rejected $TMP/sentry.yaml"
		start "$peer" "$OUT/sentry" run -config "$TMP/sentry.yaml"
		;;
	esac
	pg=$STARTED_PGID
	wait_up "$peer" "$pg" "${PORT[$peer]}"
	check_grpc "$peer" "${PORT[$peer]}"
	bench "$peer" "${PORT[$peer]}" "$pg"
	stop "$peer" "$pg" "${PORT[$peer]}"
done
stop backend "$BACKEND_PG" "$BACKEND_PORT"
for port in $BACKEND_PORT "${PORT[@]}" $ADMIN_PORT; do
	port_free "$port" || die "port $HOST:$port still in use after the run"
done

# ---------------------------------------------------------------- report
get() { # get PEER FIELD (1 req/s, 3 p99)
	local r
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r -a f <<<"$r"
		if [ "${f[0]}" = "$1" ]; then echo "${f[$2]}"; return; fi
	done
}
{
	echo "## gRPC unary over h2c ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores; grpcload -conns $CONNS -streams $STREAMS, ${DURATION}s measured after ${WARMUP}s)"
	echo
	echo "| peer | req/s | p50 ms | p99 ms | failed | proxy CPU s | calls per CPU s |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r peer rps p50 p99 errs ok cpu <<<"$r"
		printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$peer" "$rps" "$p50" "$p99" "$errs" "$cpu" \
			"$(awk -v n="$ok" -v c="$cpu" 'BEGIN { if (c + 0 > 0) printf "%.0f", n / c; else print "n/a" }')"
	done
	echo
	echo "| ratio | req/s | p99 (lower is better) |"
	echo "|---|---:|---:|"
	for s in sentry sentry-off; do
		for other in nginx haproxy direct; do
			[ -n "$(get "$s" 1)" ] && [ -n "$(get "$other" 1)" ] || continue
			echo "| $s/$other | $(ratio "$(get "$s" 1)" "$(get "$other" 1)") | $(ratio "$(get "$s" 3)" "$(get "$other" 3)") |"
		done
	done
	if [ ${#WARNINGS[@]} -gt 0 ]; then
		echo
		echo "Warnings:"
		for w in "${WARNINGS[@]}"; do echo "- $w"; done
	fi
	echo
	echo "Versions: $(nginx -v 2>&1 | sed 's/^nginx version: //'); $(haproxy -v 2>&1 | head -1 | awk '{print "haproxy " $3}'); $(go version | awk '{print $3}')."
	echo "Load average (1/5/15 min) before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)."
} >"$OUT/grpc.md"
cat "$OUT/grpc.md"
log "table in $OUT/grpc.md; raw output in $OUT/load-*.txt"
