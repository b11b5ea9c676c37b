#!/usr/bin/env bash
# idle.sh — memory per idle keep-alive connection: sentry against nginx and
# HAProxy on loopback. Each peer in turn is started alone in front of one
# shared trivial backend (e2e/bench/backend); its RSS (VmRSS summed over
# every process of its session, from /proc) is read once it answers, then
# N client connections (e2e/bench/idleconns) each make one request, read
# the whole response and stay open and idle, and the RSS is read again.
# The figure is (after - before) / N, in KiB per connection.
#
#   h1:  plain HTTP/1.1 keep-alive connections
#   h2:  HTTP/2 over TLS (ALPN h2), one GET on stream 1 each
#
# Usage:
#   bash e2e/bench/idle.sh [--quick] [--out DIR]
#
# Environment:
#   N         idle connections per peer   (default 9000; --quick sets 1000)
#   PEERS     h1 peers, in this order     (default "nginx haproxy sentry")
#   H2_PEERS  h2 peers, in this order     (default "nginx sentry"; haproxy
#             is known too)
#   SETTLE    seconds between the last connection's response and the
#             second reading (default 3)
#   SENTRY_BASE_BIN  a sentry binary, e.g. a build of an earlier commit:
#             the peer "sentry-base" runs it (add it to PEERS/H2_PEERS)
#   The peer "sentry-portable" is sentry with server.engine: portable
#   (goroutines: fasthttp, crypto/tls and the HTTP/2 server's goroutine
#   driver); add it to PEERS/H2_PEERS.
#   OUT       output dir                  (default e2e/bench/out-idle)
#
# Memory is not a speed figure: other work on the machine does not change
# it much, but every process this starts is bounded (the client holds its
# connections at most 120 s + N/100 s) and stopped by a trap on any exit.
# It needs `ulimit -n` of N + 100 or more (the script raises the soft
# limit to the hard one).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=${N:-9000}
PEERS=${PEERS:-"nginx haproxy sentry"}
H2_PEERS=${H2_PEERS-"nginx sentry"}
SETTLE=${SETTLE:-3}
OUT=${OUT:-$ROOT/e2e/bench/out-idle}
READY_WAIT=10

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) N=1000 ;;
	--out) OUT=$2; shift ;;
	--out=*) OUT=${1#--out=} ;;
	-h | --help) sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "idle.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
	esac
	shift
done
for v in N SETTLE; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "idle.sh: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
for p in $PEERS $H2_PEERS; do
	case "$p" in
	nginx | haproxy | sentry | sentry-portable) ;;
	sentry-base) [ -x "${SENTRY_BASE_BIN:-}" ] || { echo "idle.sh: sentry-base needs SENTRY_BASE_BIN" >&2; exit 2; } ;;
	*) echo "idle.sh: unknown peer '$p' (known: nginx haproxy sentry sentry-portable sentry-base)" >&2; exit 2 ;;
	esac
done

HOST=127.0.0.1
BACKEND_PORT=18280
declare -A PORT=([nginx]=18281 [haproxy]=18282 [sentry]=18284 [sentry-portable]=18284 [sentry-base]=18284)
ADMIN_PORT=18285
MAXCONN=$((N + 100))

BENCH_TAG=idle
# shellcheck source=e2e/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $((N + 100)) ] ||
	die "ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)); N=$N needs $((N + 100)) or more"

need_tools $PEERS $H2_PEERS -- curl:curl openssl:openssl

TMP=$(mktemp -d /tmp/sentry-idle.XXXXXX)
mkdir -p "$OUT"
rm -f "$OUT"/log-*.txt "$OUT"/idle.md
OUT=$(cd "$OUT" && pwd)

log "building sentry, backend and idleconns into $OUT"
(cd "$ROOT" && go build -o "$OUT/sentry" ./cmd/sentry) || die "go build ./cmd/sentry failed"
(cd "$ROOT" && go build -o "$OUT/backend" ./e2e/bench/backend) || die "go build backend failed"
(cd "$ROOT" && go build -o "$OUT/idleconns" ./e2e/bench/idleconns) || die "go build idleconns failed"
ports_free $BACKEND_PORT "${PORT[@]}" $ADMIN_PORT

bench_cert

# ---------------------------------------------------------------- configs
# Each as its expert would run it for many idle clients: keep-alive on
# with a timeout well past the run, connection limits above N, the
# descriptor limit raised, no access log.

# write_nginx_conf PROTO
write_nginx_conf() {
	local listen="listen $HOST:${PORT[nginx]};"
	[ "$1" = h2 ] && listen="listen $HOST:${PORT[nginx]} ssl http2;
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;"
	mkdir -p "$TMP/nginx"
	cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile $((MAXCONN * 2));
pid $TMP/nginx.pid;
error_log $TMP/nginx.error.log warn;
events { worker_connections $MAXCONN; }
http {
    access_log off;
    default_type text/plain;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    upstream bench_backend {
        server $HOST:$BACKEND_PORT;
        keepalive 64;
    }
    server {
        $listen
        location / {
            proxy_pass http://bench_backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
}
# write_haproxy_conf PROTO
write_haproxy_conf() {
	local tls=""
	[ "$1" = h2 ] && tls=" ssl crt $TMP/haproxy.pem alpn h2,http/1.1"
	cat >"$TMP/haproxy.cfg" <<EOF
global
    nbthread 2
    maxconn $MAXCONN
    pidfile $TMP/haproxy.pid
defaults
    mode http
    option http-keep-alive
    http-reuse always
    maxconn $MAXCONN
    timeout connect 5s
    timeout client 300s
    timeout server 30s
    timeout http-keep-alive 300s
frontend relay
    bind $HOST:${PORT[haproxy]}$tls
    default_backend bench_backend
backend bench_backend
    server b1 $HOST:$BACKEND_PORT
EOF
}
# write_sentry_policy PROTO [ENGINE]: the default engine (loops), or
# ENGINE (portable).
write_sentry_policy() {
	local tls="" engine=""
	[ -n "${2:-}" ] && engine="
  engine: $2"
	[ "$1" = h2 ] && tls="
    tls:
      cert: $TMP/cert.pem
      key: $TMP/key.pem"
	cat >"$TMP/sentry.yaml" <<EOF
admin:
  listen: $HOST:$ADMIN_PORT
server:
  idle_timeout: 300s
  max_conns: $MAXCONN$engine
apps:
  - name: bench
    listen: $HOST:${PORT[sentry]}$tls
    backends:
      static: [$HOST:$BACKEND_PORT]
EOF
}

# ---------------------------------------------------------------- measure
# wait_up NAME PGID SCHEME PORT: bounded wait until PORT answers 200.
wait_up() {
	local name=$1 pg=$2 scheme=$3 port=$4 code _ opt=--http1.1
	[ "$scheme" = https ] && opt=--http2
	for _ in $(seq $((READY_WAIT * 10))); do
		kill -0 "$pg" 2>/dev/null || { sed 's/^/    /' "$TMP/$name.log" >&2 || true; die "$name exited during start-up"; }
		code=$(curl -sk $opt -o /dev/null -m 1 -w '%{http_code}' "$scheme://$HOST:$port/" 2>/dev/null || true)
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	sed 's/^/    /' "$TMP/$name.log" >&2 || true
	die "$name did not answer 200 on $port within ${READY_WAIT}s"
}

RESULTS=() # "proto|peer|before KiB|after KiB|open|failed|KiB per conn"
WARNINGS=()
# measure PEER PROTO PGID
measure() {
	local peer=$1 proto=$2 sid=$3 before after line open failed hold fifo cpid _
	sleep 1
	before=$(rss_kb "$sid")
	hold=$((120 + N / 100))
	fifo="$TMP/idle-$peer-$proto.in"
	rm -f "$fifo" && mkfifo "$fifo"
	log "$peer $proto: idleconns -n $N -proto $proto (RSS before: $before KiB)"
	# The client holds its connections until its stdin (the FIFO) closes.
	setsid "$OUT/idleconns" -addr "$HOST:${PORT[$peer]}" -n "$N" -proto "$proto" -hold "${hold}s" \
		<"$fifo" >"$TMP/idle-$peer-$proto.out" 2>"$TMP/idle-$peer-$proto.err" &
	cpid=$!
	LOAD_PID=$cpid
	exec 7>"$fifo"
	line=""
	for _ in $(seq $((hold * 10))); do
		line=$(grep -m1 '^ready ' "$TMP/idle-$peer-$proto.out" 2>/dev/null || true)
		[ -n "$line" ] && break
		kill -0 "$cpid" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$line" ] || { exec 7>&-; cat "$TMP/idle-$peer-$proto.err" >&2; die "idleconns against $peer ($proto) did not get ready"; }
	read -r _ open failed <<<"$line"
	sleep "$SETTLE"
	after=$(rss_kb "$sid")
	exec 7>&- # the client closes its connections and exits
	wait "$cpid" 2>/dev/null || true
	LOAD_PID=""
	[ "$failed" = 0 ] || WARNINGS+=("$peer $proto: $failed of $N connections failed: $(head -1 "$TMP/idle-$peer-$proto.err")")
	RESULTS+=("$proto|$peer|$before|$after|$open|$failed|$(awk -v a="$after" -v b="$before" -v n="$open" 'BEGIN { if (n > 0) printf "%.2f", (a - b) / n; else print "n/a" }')")
	log "$peer $proto: $open open, $failed failed; RSS after: $after KiB"
}

# ---------------------------------------------------------------- run
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "output: $OUT; N=$N; h1: $PEERS; h2: $H2_PEERS"
start backend "$OUT/backend" -listen "$HOST:$BACKEND_PORT"
BACKEND_PG=$STARTED_PGID
wait_up backend "$BACKEND_PG" http "$BACKEND_PORT"

run_peer() { # run_peer PEER PROTO
	local peer=$1 proto=$2 scheme=http pg bin
	[ "$proto" = h2 ] && scheme=https
	case "$peer" in
	nginx)
		write_nginx_conf "$proto"
		nginx -t -q -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log" || die "nginx -t rejected $TMP/nginx.conf"
		start nginx nginx -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log"
		;;
	haproxy)
		write_haproxy_conf "$proto"
		haproxy -c -q -f "$TMP/haproxy.cfg" || die "haproxy -c rejected $TMP/haproxy.cfg"
		start haproxy haproxy -db -f "$TMP/haproxy.cfg"
		;;
	sentry | sentry-base | sentry-portable)
		bin="$OUT/sentry"
		[ "$peer" = sentry-base ] && bin=$SENTRY_BASE_BIN
		engine=""
		[ "$peer" = sentry-portable ] && engine=portable
		write_sentry_policy "$proto" "$engine"
		"$bin" check -config "$TMP/sentry.yaml" >&2 || die "sentry check rejected $TMP/sentry.yaml"
		start "$peer" "$bin" run -config "$TMP/sentry.yaml"
		;;
	esac
	pg=$STARTED_PGID
	wait_up "$peer" "$pg" "$scheme" "${PORT[$peer]}"
	measure "$peer" "$proto" "$pg"
	stop "$peer-$proto" "$pg" "${PORT[$peer]}"
	cp "$TMP/$peer.log" "$OUT/log-$peer-$proto.txt" 2>/dev/null || true
}
for peer in $PEERS; do run_peer "$peer" h1; done
for peer in $H2_PEERS; do run_peer "$peer" h2; done
stop backend "$BACKEND_PG"

# ---------------------------------------------------------------- report
{
	echo "## Memory per idle keep-alive connection ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, N=$N)"
	echo
	echo "| proto | peer | RSS before KiB | RSS after KiB | open | failed | KiB per conn |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r proto peer before after open failed per <<<"$r"
		printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$proto" "$peer" "$before" "$after" "$open" "$failed" "$per"
	done
	if [ ${#WARNINGS[@]} -gt 0 ]; then
		echo
		echo "Warnings:"
		for w in "${WARNINGS[@]}"; do echo "- $w"; done
	fi
	echo
	echo "Versions: $("$OUT/sentry" version 2>&1 | head -1); $(nginx -v 2>&1 | sed 's/^nginx version: //'); $(haproxy -v 2>&1 | head -1 | awk '{print "haproxy " $3}')."
	echo "Load average before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)."
} >"$OUT/idle.md"
cat "$OUT/idle.md"
log "table in $OUT/idle.md"
