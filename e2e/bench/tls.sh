#!/usr/bin/env bash
# tls.sh — TLS termination side by side: sentry against nginx and HAProxy on
# loopback, each terminating TLS in front of one shared trivial backend
# (e2e/bench/backend, 128-byte responses, plain HTTP/1.1). Two paths:
#
#   h2:  h2load -c CONNS -m 10 -t THREADS over TLS (ALPN h2)
#   h1:  wrk -tTHREADS -cCONNS over https (ALPN http/1.1)
#
# Usage:
#   bash e2e/bench/tls.sh [--quick] [--out DIR]
#
# Environment:
#   DURATION  seconds per measured run    (default 10; --quick sets 3)
#   CONNS     client connections         (default 64)
#   THREADS   client threads             (default 2)
#   STREAMS   h2load -m, streams per conn (default 10)
#   PEERS     peers, in this order       (default "nginx haproxy sentry";
#             "sentry-portable" is this build with server.engine: portable
#             (TLS on crypto/tls, HTTP/1.1 on fasthttp, h2 on the goroutine
#             driver), for the engine comparison; "sentry-base" runs
#             SENTRY_BASE_BIN, e.g. a build of an earlier commit, for a
#             same-run comparison of two sentry builds)
#   PATHS     paths to run               (default "h2 h1")
#   ROUNDS    rounds of every peer and path (default 1); round r starts the
#             peer list at its r-th peer (rotation: over a multiple of the
#             peer count, each peer runs first equally often), and the
#             table adds the median ratio over rounds (logs: last round's)
#   SENTRY_BASE_BIN  the sentry binary sentry-base runs
#   OUT       output dir                 (default e2e/bench/out-tls)
#
# Every peer runs alone, in the foreground, in its own process group, and is
# stopped before the next starts; a trap stops whatever is left on any exit.
# The certificate is a fresh self-signed ECDSA P-256 one (openssl). p99 for
# h2 comes from h2load's per-request log (--log-file), for h1 from wrk
# --latency.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
STREAMS=${STREAMS:-10}
PEERS=${PEERS:-"nginx haproxy sentry"}
PATHS=${PATHS:-"h2 h1"}
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-$ROOT/e2e/bench/out-tls}
WARMUP=1
READY_WAIT=10

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) DURATION=3 ;;
	--out) OUT=$2; shift ;;
	--out=*) OUT=${1#--out=} ;;
	-h | --help) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tls.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
	esac
	shift
done
for v in DURATION CONNS THREADS STREAMS ROUNDS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "tls.sh: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
for p in $PEERS; do
	case "$p" in
	nginx | haproxy | sentry | sentry-portable) ;;
	sentry-base) [ -x "${SENTRY_BASE_BIN:-}" ] || { echo "tls.sh: sentry-base needs SENTRY_BASE_BIN" >&2; exit 2; } ;;
	*) echo "tls.sh: unknown peer '$p' (known: nginx haproxy sentry sentry-portable sentry-base)" >&2; exit 2 ;;
	esac
done
for p in $PATHS; do
	case "$p" in h2 | h1) ;; *) echo "tls.sh: unknown path '$p' (known: h2 h1)" >&2; exit 2 ;; esac
done

HOST=127.0.0.1
BACKEND_PORT=18180
declare -A PORT=([nginx]=18181 [haproxy]=18182 [sentry]=18184 [sentry-portable]=18184 [sentry-base]=18184)
ADMIN_PORT=18185

# ---------------------------------------------------------------- cleanup
BENCH_TAG=tls
# shellcheck source=e2e/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# wait_up NAME PGID SCHEME PORT: bounded wait until PORT answers any status.
wait_up() {
	local name=$1 pg=$2 scheme=$3 port=$4 code _
	for _ in $(seq $((READY_WAIT * 10))); do
		kill -0 "$pg" 2>/dev/null || { sed 's/^/    /' "$TMP/$name.log" >&2 || true; die "$name exited during start-up"; }
		code=$(curl -sk -o /dev/null -m 1 -w '%{http_code}' "$scheme://$HOST:$port/" 2>/dev/null || true)
		[ -n "$code" ] && [ "$code" != 000 ] && return 0
		sleep 0.1
	done
	sed 's/^/    /' "$TMP/$name.log" >&2 || true
	die "$name did not answer on $port within ${READY_WAIT}s"
}
# check_alpn NAME PORT: h2 and http/1.1 both answer 200.
check_alpn() {
	local name=$1 port=$2 c
	c=$(curl -sk --http2 -o /dev/null -m 2 -w '%{http_version} %{http_code}' "https://$HOST:$port/" || true)
	[ "$c" = "2 200" ] || die "$name over h2 answered '$c', want '2 200'"
	c=$(curl -sk --http1.1 -o /dev/null -m 2 -w '%{http_version} %{http_code}' "https://$HOST:$port/" || true)
	[ "$c" = "1.1 200" ] || die "$name over HTTP/1.1 answered '$c', want '1.1 200'"
}

# ---------------------------------------------------------------- tools
need_tools $PEERS -- wrk:wrk h2load:nghttp2-client curl:curl openssl:openssl

TMP=$(mktemp -d /tmp/sentry-tls.XXXXXX)
mkdir -p "$OUT"
rm -f "$OUT"/load-*.txt "$OUT"/log-*.txt "$OUT"/tls.md
OUT=$(cd "$OUT" && pwd)

log "building sentry and backend into $OUT"
if [[ " $PEERS " == *" sentry "* ]] || [[ " $PEERS " == *" sentry-portable "* ]]; then
	(cd "$ROOT" && go build -o "$OUT/sentry" ./cmd/sentry) || die "go build ./cmd/sentry failed"
fi
(cd "$ROOT" && go build -o "$OUT/backend" ./e2e/bench/backend) || die "go build backend failed"
ports_free $BACKEND_PORT "${PORT[@]}" $ADMIN_PORT

bench_cert

# ---------------------------------------------------------------- configs
write_nginx_conf() {
	mkdir -p "$TMP/nginx"
	# nginx 1.22 (Debian 12) has "listen ... http2"; "http2 on" is 1.25+.
	# keepalive_requests also bounds requests per h2 connection (1.19.7+).
	cat >"$TMP/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes auto;
pid $TMP/nginx.pid;
error_log $TMP/nginx.error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    default_type text/plain;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    keepalive_requests 1000000;
    # keepalive sizes the idle upstream cache: h2load keeps CONNS × STREAMS
    # (640) requests in flight, and a cache smaller than that makes nginx
    # close and reopen backend connections on every burst (17-19k req/s
    # instead of twice that), which no nginx expert would leave.
    upstream bench_backend {
        server $HOST:$BACKEND_PORT;
        keepalive 1024;
    }
    server {
        listen $HOST:${PORT[nginx]} ssl http2;
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        location / {
            proxy_pass http://bench_backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
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
    bind $HOST:${PORT[haproxy]} ssl crt $TMP/haproxy.pem alpn h2,http/1.1
    default_backend bench_backend
backend bench_backend
    server b1 $HOST:$BACKEND_PORT
EOF
}
# write_sentry_policy [ENGINE]: with ENGINE, server.engine is set to it
# (the default otherwise, which an earlier build also reads).
write_sentry_policy() {
	cat >"$TMP/sentry.yaml" <<EOF
admin:
  listen: $HOST:$ADMIN_PORT
  pprof: true
${1:+server:
  engine: $1
}apps:
  - name: bench
    listen: $HOST:${PORT[sentry]}
    tls:
      cert: $TMP/cert.pem
      key: $TMP/key.pem
    backends:
      static: [$HOST:$BACKEND_PORT]
EOF
}

# ---------------------------------------------------------------- load
RESULTS=() # "round|peer|path|rps|p50ms|p99ms|bad|requests|cpu"
ROUND=1
WARNINGS=()
to_ms() {
	awk -v v="$1" 'BEGIN { n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
		printf "%.3f", n }'
}
# run_load SECONDS OUTFILE CMD...: bounded, in the background, waited for.
run_load() {
	local secs=$1 out=$2 rc=0
	shift 2
	timeout $((secs + 30)) "$@" >"$out" 2>&1 &
	LOAD_PID=$!
	wait "$LOAD_PID" || rc=$?
	LOAD_PID=""
	return "$rc"
}
# bench PEER PATH PORT SID
bench() {
	local peer=$1 path=$2 port=$3 sid=$4 out t0 t1 cpu rps p50 p99 bad errs reqs url
	url="https://$HOST:$port/"
	out="$TMP/load-$peer-$path-r$ROUND.txt"
	if [ "$path" = h2 ]; then
		# h2load's own warm-up: connections and handshakes first, then
		# DURATION seconds counted (CPU is measured over both).
		log "$peer h2: h2load -c $CONNS -m $STREAMS -t $THREADS --warm-up-time=$WARMUP -D $DURATION $url"
		t0=$(cpu_ticks "$sid")
		run_load $((DURATION + WARMUP)) "$out" h2load -c "$CONNS" -m "$STREAMS" -t "$THREADS" --warm-up-time="$WARMUP" -D "$DURATION" --log-file="$TMP/h2log" "$url" ||
			{ cat "$out" >&2; die "h2load against $peer failed"; }
		t1=$(cpu_ticks "$sid")
		grep -q 'Application protocol: h2' "$out" || { cat "$out" >&2; die "$peer: h2load did not negotiate h2"; }
		rps=$(awk '/^finished in/ { gsub(/,/, ""); print $4 }' "$out")
		reqs=$(awk '/^requests:/ { print $8 }' "$out")
		bad=$(awk '/^requests:/ { print $2 - $8 }' "$out")
		read -r p50 p99 < <(awk '{ print $3 }' "$TMP/h2log" | sort -n | awk '{ a[NR] = $1 } END {
			if (NR == 0) { print "", ""; exit }
			i50 = int(NR * 0.50); if (i50 < 1) i50 = 1; i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
			printf "%.3f %.3f\n", a[i50] / 1000, a[i99] / 1000 }')
		rm -f "$TMP/h2log"
	else
		run_load "$WARMUP" /dev/null wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$url" || die "wrk warm-up against $peer failed"
		log "$peer h1: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency $url"
		t0=$(cpu_ticks "$sid")
		run_load "$DURATION" "$out" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$url" ||
			{ cat "$out" >&2; die "wrk against $peer failed"; }
		t1=$(cpu_ticks "$sid")
		rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
		p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$out")")
		p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$out")")
		reqs=$(awk '/requests in/ { print $1 }' "$out")
		bad=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
		errs=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$out")
		bad=$((${bad:-0} + ${errs:-0}))
	fi
	[ -n "$rps" ] && [ -n "$p99" ] && [ -n "$reqs" ] || { cat "$out" >&2; die "could not parse the $path output for $peer"; }
	cp "$out" "$OUT/load-$peer-$path-r$ROUND.txt"
	[ "${bad:-0}" = 0 ] || WARNINGS+=("round $ROUND, $peer $path: $bad of $reqs requests failed or were not 2xx (see $OUT/load-$peer-$path-r$ROUND.txt)")
	cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", d / hz }')
	RESULTS+=("$ROUND|$peer|$path|$rps|$p50|$p99|${bad:-0}|$reqs|$cpu")
}

# ---------------------------------------------------------------- run
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "output: $OUT; ${DURATION}s per run; $THREADS threads, $CONNS conns, $STREAMS streams; peers: $PEERS; paths: $PATHS; rounds: $ROUNDS"
start backend "$OUT/backend" -listen "$HOST:$BACKEND_PORT"
BACKEND_PG=$STARTED_PGID
wait_up backend "$BACKEND_PG" http "$BACKEND_PORT"

read -r -a PEER_LIST <<<"$PEERS"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
order=()
for ((i = 0; i < ${#PEER_LIST[@]}; i++)); do order+=("${PEER_LIST[$(((ROUND - 1 + i) % ${#PEER_LIST[@]}))]}"); done
[ "$ROUNDS" -gt 1 ] && log "round $ROUND of $ROUNDS: ${order[*]}"
for peer in "${order[@]}"; do
	case "$peer" in
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
	sentry | sentry-portable | sentry-base)
		bin="$OUT/sentry"
		[ "$peer" = sentry-base ] && bin=$SENTRY_BASE_BIN
		engine=
		[ "$peer" = sentry-portable ] && engine=portable
		write_sentry_policy "$engine"
		"$bin" check -config "$TMP/sentry.yaml" >&2 || die "sentry check rejected $TMP/sentry.yaml"
		start "$peer" "$bin" run -config "$TMP/sentry.yaml"
		;;
	esac
	pg=$STARTED_PGID
	wait_up "$peer" "$pg" https "${PORT[$peer]}"
	check_alpn "$peer" "${PORT[$peer]}"
	for path in $PATHS; do bench "$peer" "$path" "${PORT[$peer]}" "$pg"; done
	stop "$peer" "$pg"
done
done
stop backend "$BACKEND_PG"

# ---------------------------------------------------------------- report
get() { # get ROUND PEER PATH FIELD (3 req/s, 4 p50, 5 p99, 7 requests, 8 CPU s, 9 requests per CPU s)
	local r
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r -a f <<<"$r"
		if [ "${f[0]}" = "$1" ] && [ "${f[1]}" = "$2" ] && [ "${f[2]}" = "$3" ]; then
			if [ "$4" = 9 ]; then
				awk -v n="${f[7]}" -v c="${f[8]}" 'BEGIN { if (c > 0) printf "%.0f", n / c }'
			else
				echo "${f[$4]}"
			fi
			return
		fi
	done
}
# median of the numbers given (n/a and empty ones left out)
median() { printf '%s\n' "$@" | { grep -E '^[0-9.]+$' || true; } | sort -n | awk '{ a[NR] = $1 } END {
	if (NR == 0) { print "n/a"; exit }
	if (NR % 2) printf "%.2f", a[(NR + 1) / 2]; else printf "%.2f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# ratio_row LABEL FIELD S OTHER: one row of the ratio table, every round
# (and the median when there are several).
ratio_row() {
	local label=$1 fld=$2 s=$3 other=$4 path r line v
	line="| $label"
	for path in h2 h1; do
		local vals=()
		for ((r = 1; r <= ROUNDS; r++)); do
			v=$(ratio "$(get "$r" "$s" "$path" "$fld")" "$(get "$r" "$other" "$path" "$fld")")
			vals+=("$v")
		done
		if [ "$ROUNDS" -gt 1 ]; then
			line="$line | $(median "${vals[@]}") (${vals[*]})"
		else
			line="$line | ${vals[0]}"
		fi
	done
	echo "$line |"
}
{
	echo "## TLS termination ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores; h2: h2load -c$CONNS -m$STREAMS -t$THREADS -D$DURATION; h1: wrk -t$THREADS -c$CONNS -d${DURATION}s)"
	echo
	echo "| round | peer | path | req/s | p50 ms | p99 ms | failed | proxy CPU s | req per CPU s |"
	echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r round peer path rps p50 p99 bad reqs cpu <<<"$r"
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$round" "$peer" "$path" "$rps" "$p50" "$p99" "$bad" "$cpu" \
			"$(awk -v n="$reqs" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", n / c; else print "n/a" }')"
	done
	echo
	if [ "$ROUNDS" -gt 1 ]; then
		echo "| ratio: median (each round) | h2 | h1 |"
	else
		echo "| ratio | h2 | h1 |"
	fi
	echo "|---|---:|---:|"
	for s in sentry sentry-portable sentry-base; do
		for other in nginx haproxy sentry; do
			[ "$s" = "$other" ] && continue
			[ -n "$(get 1 "$s" h2 3)$(get 1 "$s" h1 3)" ] && [ -n "$(get 1 "$other" h2 3)$(get 1 "$other" h1 3)" ] || continue
			ratio_row "req/s $s/$other" 3 "$s" "$other"
			ratio_row "p99 $s/$other (lower is better)" 5 "$s" "$other"
			ratio_row "req per CPU s $s/$other" 9 "$s" "$other"
		done
	done
	if [ ${#WARNINGS[@]} -gt 0 ]; then
		echo
		echo "Warnings:"
		for w in "${WARNINGS[@]}"; do echo "- $w"; done
	fi
	echo
	echo "Versions: $(nginx -v 2>&1 | sed 's/^nginx version: //'); $(haproxy -v 2>&1 | head -1 | awk '{print "haproxy " $3}'); $(h2load --version 2>&1 | head -1); $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')."
	echo "Load average before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)."
} >"$OUT/tls.md"
cat "$OUT/tls.md"
log "table in $OUT/tls.md; raw output in $OUT/load-*.txt"
