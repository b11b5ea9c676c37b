#!/usr/bin/env bash
# peers.sh — whole-process throughput/latency comparison of sentry against
# nginx, HAProxy and Caddy on loopback, in front of one shared trivial
# backend (e2e/bench/backend). See e2e/bench/README.md.
#
# Usage:
#   bash e2e/bench/peers.sh [--quick] [--out DIR]
#
# Environment:
#   DURATION  seconds per wrk run          (default 10; --quick sets 3)
#   CONNS     wrk connections              (default 64)
#   THREADS   wrk threads                  (default 2)
#   PEERS     peers to run, in this order  (default "nginx haproxy caddy sentry";
#             "sentry-portable" is sentry with server.engine: portable
#             (no event loops), for the engine comparison; "sentry-log" is
#             sentry with its access log on (text, to a file, sampled at
#             the defaults: 1,000 lines/s, rejections 100/s);
#             "sentry-logstall" is sentry-log writing to a FIFO that a
#             process holds open and never reads (a stuck log reader),
#             relay only;
#             "sentry-period" is sentry in batch mode with a 20 ms class
#             period, relay only (below overload its requests are admitted
#             early, without waiting for their run; strict_periods would
#             make each wait);
#             "sentry-base" is the binary SENTRY_BASE_BIN, e.g. a build of an
#             earlier commit, for a same-run regression check)
#   SENTRY_BASE_BIN  the sentry binary the sentry-base peer runs
#   PATHS     which paths to measure (default "relay reject"; "reject" alone
#             compares the prebuilt 503s without a relay run before them)
#   OUT       output dir for binaries and peers.md (default e2e/bench/out)
#
# Every peer is started alone with its own config file in a temp dir, in the
# foreground (no systemd), in its own process group, and killed before the
# next one starts. A trap kills whatever is still running on any exit.
set -euo pipefail

# ---------------------------------------------------------------- settings
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
PEERS=${PEERS:-"nginx haproxy caddy sentry"}
PATHS=${PATHS:-"relay reject"}
want() { [[ " $PATHS " == *" $1 "* ]]; }
OUT=${OUT:-$ROOT/e2e/bench/out}
WARMUP=1          # seconds of wrk before each measured run
READY_WAIT=10     # seconds to wait for a port to answer

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) DURATION=3 ;;
	--out) OUT=$2; shift ;;
	--out=*) OUT=${1#--out=} ;;
	-h | --help)
		sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) echo "peers.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
	esac
	shift
done

for p in $PATHS; do
	case $p in relay | reject) ;; *) echo "peers.sh: PATHS: unknown path '$p' (relay, reject)" >&2; exit 2 ;; esac
done
for v in DURATION CONNS THREADS; do
	if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
		echo "peers.sh: $v must be a positive integer, got '${!v}'" >&2
		exit 2
	fi
done
for p in $PEERS; do
	case "$p" in
	nginx | haproxy | caddy | sentry | sentry-portable | sentry-period | sentry-log | sentry-logstall) ;;
	sentry-base)
		[ -x "${SENTRY_BASE_BIN:-}" ] || { echo "peers.sh: sentry-base needs SENTRY_BASE_BIN, an executable sentry binary" >&2; exit 2; }
		;;
	*) echo "peers.sh: unknown peer '$p' (known: nginx haproxy caddy sentry sentry-portable sentry-period sentry-log sentry-logstall sentry-base)" >&2; exit 2 ;;
	esac
done

# Ports, all on 127.0.0.1. One backend; each peer has a relay port and a
# reject port (sentry's reject instance is a second process).
HOST=127.0.0.1
BACKEND_PORT=18080
declare -A RELAY_PORT=([nginx]=18081 [haproxy]=18082 [caddy]=18083 [sentry]=18084 [sentry-portable]=18084 [sentry-period]=18084 [sentry-log]=18084 [sentry-logstall]=18084 [sentry-base]=18084)
declare -A REJECT_PORT=([nginx]=18091 [haproxy]=18092 [caddy]=18093 [sentry]=18094 [sentry-portable]=18094 [sentry-period]=18094 [sentry-log]=18094 [sentry-logstall]=18094 [sentry-base]=18094)
SENTRY_ADMIN_PORT=18085
SENTRY_REJECT_ADMIN_PORT=18095

BENCH_TAG=peers
# shellcheck source=e2e/bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() { # stop NAME PGID: stop one group, forget it, keep its log in $OUT
	local name=$1 pg=$2 keep=() x
	stop_group "$pg"
	wait "$pg" 2>/dev/null || true
	cp "$TMP/$name.log" "$OUT/log-$name.txt" 2>/dev/null || true
	for x in "${PGIDS[@]}"; do [ "$x" = "$pg" ] || keep+=("$x"); done
	PGIDS=("${keep[@]+"${keep[@]}"}")
}

# wait_http NAME PGID PORT: wait (bounded) until an HTTP request to PORT gets
# any HTTP status; fail with the peer's log if it dies or never answers.
wait_http() {
	local name=$1 pg=$2 port=$3 code _
	for _ in $(seq $((READY_WAIT * 10))); do
		if ! kill -0 "$pg" 2>/dev/null; then
			log "$name exited during start-up; its output:"
			sed 's/^/    /' "$TMP/$name.log" >&2 || true
			die "$name failed to start"
		fi
		code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://$HOST:$port/" 2>/dev/null || true)
		if [ -n "$code" ] && [ "$code" != "000" ]; then
			return 0
		fi
		sleep 0.1
	done
	log "$name did not answer on $HOST:$port within ${READY_WAIT}s; its output:"
	sed 's/^/    /' "$TMP/$name.log" >&2 || true
	die "$name not ready"
}

# ---------------------------------------------------------------- tools
need_tools $PEERS -- wrk:wrk curl:curl
command -v go >/dev/null || die "go not found in PATH"

TMP=$(mktemp -d /tmp/sentry-peers.XXXXXX)
mkdir -p "$OUT"
rm -f "$OUT"/wrk-*.txt "$OUT"/log-*.txt "$OUT"/metrics-*.txt "$OUT"/peers.md
OUT=$(cd "$OUT" && pwd)

# ---------------------------------------------------------------- build
log "building sentry and backend into $OUT"
if [[ " $PEERS " == *" sentry"* ]]; then
	(cd "$ROOT" && go build -o "$OUT/sentry" ./cmd/sentry) || die "go build ./cmd/sentry failed"
fi
(cd "$ROOT" && go build -o "$OUT/backend" ./e2e/bench/backend) || die "go build ./e2e/bench/backend failed"

for port in $BACKEND_PORT "${RELAY_PORT[@]}" "${REJECT_PORT[@]}" $SENTRY_ADMIN_PORT $SENTRY_REJECT_ADMIN_PORT; do
	port_free "$port" || die "port $HOST:$port is already in use"
done

# ---------------------------------------------------------------- configs
write_nginx_conf() {
	mkdir -p "$TMP/nginx"
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
    upstream bench_backend {
        server $HOST:$BACKEND_PORT;
        keepalive 64;
    }
    server {
        listen $HOST:${RELAY_PORT[nginx]};
        location / {
            proxy_pass http://bench_backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
    server {
        listen $HOST:${REJECT_PORT[nginx]};
        location / {
            return 503 "rejected\n";
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
    bind $HOST:${RELAY_PORT[haproxy]}
    default_backend bench_backend

frontend reject
    bind $HOST:${REJECT_PORT[haproxy]}
    http-request return status 503 content-type text/plain string "rejected\n"

backend bench_backend
    server b1 $HOST:$BACKEND_PORT
EOF
}

write_caddy_conf() {
	cat >"$TMP/Caddyfile" <<EOF
{
    admin off
    auto_https off
}
http://$HOST:${RELAY_PORT[caddy]} {
    reverse_proxy $HOST:$BACKEND_PORT
}
http://$HOST:${REJECT_PORT[caddy]} {
    respond "rejected" 503
}
EOF
}

# The relay in batch mode with a class period of 20 ms. Below overload an
# arrival that finds its class's queue empty and passes the test alone is
# admitted at once (batchac, Early admission); under overload requests wait
# for their class's run.
write_sentry_period_policy() {
	cat >"$TMP/sentry-period.yaml" <<EOF
admin:
  listen: $HOST:$SENTRY_ADMIN_PORT
apps:
  - name: bench
    listen: $HOST:${RELAY_PORT[sentry]}
    backends:
      static: [$HOST:$BACKEND_PORT]
    classes:
      - name: all
        default: true
        period: 20ms
    admission:
      mode: batch
      # Every connection may wait at once when the queue forms.
      batch: {queue_cap: 8192}
EOF
}

# The relay as -listen/-backend/-admin make it, on the portable engine.
write_sentry_portable_policy() {
	cat >"$TMP/sentry-portable.yaml" <<EOF
admin:
  listen: $HOST:$SENTRY_ADMIN_PORT
server:
  engine: portable
apps:
  - name: default
    listen: $HOST:${RELAY_PORT[sentry]}
    backends:
      static: [$HOST:$BACKEND_PORT]
EOF
}

# The relay as the quick policy has it, with the access log on (sampled),
# to OUTPUT (default a file).
write_sentry_log_policy() {
	cat >"$TMP/sentry-log.yaml" <<EOF
admin:
  listen: $HOST:$SENTRY_ADMIN_PORT
log:
  access: {enabled: true, output: ${1:-$TMP/access.log}}
apps:
  - name: default
    listen: $HOST:${RELAY_PORT[sentry]}
    backends:
      static: [$HOST:$BACKEND_PORT]
EOF
}

write_sentry_reject_policy() {
	cat >"$TMP/sentry-reject.yaml" <<EOF
# Every request gets sentry's prebuilt 503: the only backend is a closed
# port, ejected on the first connect refusal and kept out for an hour.
admin:
  listen: $HOST:$SENTRY_REJECT_ADMIN_PORT
apps:
  - name: bench
    listen: $HOST:${REJECT_PORT[sentry]}
    backends:
      static: [127.0.0.1:1]
    health:
      passive:
        failures: 1
        cooldown: 1h
EOF
}

# ---------------------------------------------------------------- wrk
RESULTS=()   # "peer|path|rps|p50|p99|non2xx|errors|requests|cpu_seconds"
CLK_TCK=$(getconf CLK_TCK)

# cpu_ticks SID: user+system CPU ticks used so far by every process of the
# session SID (each peer runs in its own session: see start).
cpu_ticks() {
	local pid total=0 t
	for pid in $(ps -o pid= --sid "$1" 2>/dev/null); do
		t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null) || continue
		total=$((total + ${t:-0}))
	done
	echo "$total"
}

# to_ms VALUE: wrk latency ("512.00us", "1.20ms", "1.01s", "2.00m") to ms
to_ms() {
	[ -n "$1" ] || return 0
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
		printf "%.3f", n }'
}

# run_wrk SECONDS OUTFILE ARGS...: wrk ARGS, bounded to SECONDS+30 s. It runs
# in the background and is waited for, so that a signal to this script is
# handled at once (cleanup kills it) instead of after the run.
run_wrk() {
	local secs=$1 out=$2 rc=0
	shift 2
	timeout $((secs + 30)) wrk "$@" >"$out" 2>&1 &
	LOAD_PID=$!
	wait "$LOAD_PID" || rc=$?
	LOAD_PID=""
	return "$rc"
}

# bench PEER PATH PORT EXPECT SID: run wrk, parse, record. EXPECT is "2xx"
# for relay (every response must be 2xx) or "503" for reject (every response
# must be a non-2xx). SID is the peer's session, whose CPU use is measured.
bench() {
	local peer=$1 path=$2 port=$3 expect=$4 sid=$5 out rps p50 p99 non2xx errs reqs t0 t1 cpu
	local url="http://$HOST:$port/"
	log "$peer $path: warm-up ${WARMUP}s"
	run_wrk "$WARMUP" /dev/null -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$url" ||
		die "wrk warm-up against $peer ($url) failed"
	log "$peer $path: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency $url"
	out="$TMP/wrk-$peer-$path.txt"
	t0=$(cpu_ticks "$sid")
	run_wrk "$DURATION" "$out" -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$url" ||
		{ cat "$out" >&2; die "wrk against $peer ($url) failed"; }
	t1=$(cpu_ticks "$sid")
	cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", d / hz }')
	rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
	p50=$(awk '$1 == "50%" {print $2}' "$out")
	p99=$(awk '$1 == "99%" {print $2}' "$out")
	reqs=$(awk '/requests in/ {print $1}' "$out")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")
	non2xx=${non2xx:-0}
	errs=$(awk '/Socket errors:/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$out")
	errs=${errs:-0}
	if [ -z "$rps" ] || [ -z "$p50" ] || [ -z "$p99" ] || [ -z "$reqs" ]; then
		cat "$out" >&2
		die "could not parse wrk output for $peer $path"
	fi
	cp "$out" "$OUT/wrk-$peer-$path.txt"
	if [ "$expect" = 2xx ] && [ "$non2xx" != 0 ]; then
		log "WARNING: $peer relay: $non2xx of $reqs responses were not 2xx/3xx (see $OUT/wrk-$peer-$path.txt)"
		WARNINGS+=("$peer relay: $non2xx non-2xx/3xx responses of $reqs")
	fi
	if [ "$expect" = 503 ] && [ "$non2xx" != "$reqs" ]; then
		log "WARNING: $peer reject: only $non2xx of $reqs responses were non-2xx"
		WARNINGS+=("$peer reject: $((reqs - non2xx)) of $reqs responses were 2xx/3xx")
	fi
	if [ "$errs" != 0 ]; then
		log "WARNING: $peer $path: $errs socket errors"
		WARNINGS+=("$peer $path: $errs socket errors ($(grep 'Socket errors' "$out" | sed 's/^ *//'))")
	fi
	RESULTS+=("$peer|$path|$rps|$p50|$p99|$non2xx|$errs|$reqs|$cpu")
}
WARNINGS=()

# check_status PEER PORT WANT: one curl, the status must be WANT
check_status() {
	local peer=$1 port=$2 want=$3 code
	code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$HOST:$port/" || true)
	[ "$code" = "$want" ] || die "$peer on $HOST:$port answered $code, want $want (logs in $TMP)"
}

# sentry_log_warnings NAME: turn sentry's WARN/ERROR log lines into warnings
# (the one expected ejection of the dead backend in the reject run aside).
sentry_log_warnings() {
	local name=$1 n
	n=$(grep -E '\[(WARN|ERROR)\]' "$OUT/log-$name.txt" | grep -Evc 'backend ejected: app=bench .*backend=127.0.0.1:1 ' || true)
	if [ "$n" -gt 0 ]; then
		log "WARNING: $name logged $n WARN/ERROR lines (see $OUT/log-$name.txt)"
		WARNINGS+=("$name: $n WARN/ERROR log lines, first: $(grep -E '\[(WARN|ERROR)\]' "$OUT/log-$name.txt" | grep -Ev 'backend ejected: app=bench .*backend=127.0.0.1:1 ' | head -1)")
	fi
}

# ---------------------------------------------------------------- run
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if awk -v l="${LOAD_BEFORE%% *}" 'BEGIN { exit !(l > 0.5) }'; then
	log "WARNING: load average is $LOAD_BEFORE before starting: other work on this machine will skew the numbers"
fi
log "output: $OUT; temp: $TMP; duration ${DURATION}s, $THREADS threads, $CONNS conns; peers: $PEERS"

start backend "$OUT/backend" -listen "$HOST:$BACKEND_PORT"
BACKEND_PG=$STARTED_PGID
wait_http backend "$BACKEND_PG" "$BACKEND_PORT"
check_status backend "$BACKEND_PORT" 200

for peer in $PEERS; do
	case "$peer" in
	nginx)
		write_nginx_conf
		nginx -t -q -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log" ||
			die "nginx -t rejected $TMP/nginx.conf"
		start nginx nginx -c "$TMP/nginx.conf" -e "$TMP/nginx.error.log"
		pg=$STARTED_PGID
		wait_http nginx "$pg" "${RELAY_PORT[nginx]}"
		wait_http nginx "$pg" "${REJECT_PORT[nginx]}"
		check_status nginx "${RELAY_PORT[nginx]}" 200
		check_status nginx "${REJECT_PORT[nginx]}" 503
		want relay && bench nginx relay "${RELAY_PORT[nginx]}" 2xx "$pg"
		want reject && bench nginx reject "${REJECT_PORT[nginx]}" 503 "$pg"
		stop nginx "$pg"
		;;
	haproxy)
		write_haproxy_conf
		haproxy -c -q -f "$TMP/haproxy.cfg" || die "haproxy -c rejected $TMP/haproxy.cfg"
		start haproxy haproxy -db -f "$TMP/haproxy.cfg"
		pg=$STARTED_PGID
		wait_http haproxy "$pg" "${RELAY_PORT[haproxy]}"
		wait_http haproxy "$pg" "${REJECT_PORT[haproxy]}"
		check_status haproxy "${RELAY_PORT[haproxy]}" 200
		check_status haproxy "${REJECT_PORT[haproxy]}" 503
		want relay && bench haproxy relay "${RELAY_PORT[haproxy]}" 2xx "$pg"
		want reject && bench haproxy reject "${REJECT_PORT[haproxy]}" 503 "$pg"
		stop haproxy "$pg"
		;;
	caddy)
		write_caddy_conf
		mkdir -p "$TMP/caddy-home"
		export XDG_DATA_HOME="$TMP/caddy-home" XDG_CONFIG_HOME="$TMP/caddy-home"
		caddy validate --config "$TMP/Caddyfile" --adapter caddyfile >"$TMP/caddy-validate.log" 2>&1 ||
			{ cat "$TMP/caddy-validate.log" >&2; die "caddy validate rejected $TMP/Caddyfile"; }
		start caddy caddy run --config "$TMP/Caddyfile" --adapter caddyfile
		pg=$STARTED_PGID
		wait_http caddy "$pg" "${RELAY_PORT[caddy]}"
		wait_http caddy "$pg" "${REJECT_PORT[caddy]}"
		check_status caddy "${RELAY_PORT[caddy]}" 200
		check_status caddy "${REJECT_PORT[caddy]}" 503
		want relay && bench caddy relay "${RELAY_PORT[caddy]}" 2xx "$pg"
		want reject && bench caddy reject "${REJECT_PORT[caddy]}" 503 "$pg"
		stop caddy "$pg"
		;;
	sentry | sentry-portable | sentry-period | sentry-log | sentry-logstall | sentry-base)
		bin="$OUT/sentry"
		[ "$peer" = sentry-base ] && bin=$SENTRY_BASE_BIN
		if want relay; then
			if [ "$peer" = sentry-period ]; then
				write_sentry_period_policy
				"$bin" check -config "$TMP/sentry-period.yaml" >&2 ||
					die "sentry check rejected $TMP/sentry-period.yaml"
				start "$peer" "$bin" run -config "$TMP/sentry-period.yaml"
			elif [ "$peer" = sentry-log ] || [ "$peer" = sentry-logstall ]; then
				out=""
				if [ "$peer" = sentry-logstall ]; then
					# A reader that opens the FIFO and never reads: the
					# pipe fills, then every write would block.
					out="$TMP/access.fifo"
					rm -f "$out" && mkfifo "$out"
					start logstall-reader sh -c "exec sleep $((DURATION + 120)) <'$out'"
				fi
				write_sentry_log_policy "$out"
				"$bin" check -config "$TMP/sentry-log.yaml" >&2 ||
					die "sentry check rejected $TMP/sentry-log.yaml"
				start "$peer" "$bin" run -config "$TMP/sentry-log.yaml"
			elif [ "$peer" = sentry-portable ]; then
				write_sentry_portable_policy
				"$bin" check -config "$TMP/sentry-portable.yaml" >&2 ||
					die "sentry check rejected $TMP/sentry-portable.yaml"
				start "$peer" "$bin" run -config "$TMP/sentry-portable.yaml"
			else
				start "$peer" "$bin" run -listen "$HOST:${RELAY_PORT[sentry]}" \
					-backend "$HOST:$BACKEND_PORT" -admin "$HOST:$SENTRY_ADMIN_PORT"
			fi
			pg=$STARTED_PGID
			wait_http "$peer" "$pg" "${RELAY_PORT[sentry]}"
			check_status "$peer" "${RELAY_PORT[sentry]}" 200
			bench "$peer" relay "${RELAY_PORT[sentry]}" 2xx "$pg"
			curl -s -m 2 "http://$HOST:$SENTRY_ADMIN_PORT/metrics" >"$OUT/metrics-$peer.txt" 2>/dev/null || true
			stop "$peer" "$pg"
			sentry_log_warnings "$peer"
		fi
		# The reject path does not depend on periods.
		[ "$peer" = sentry-period ] && continue
		[ "$peer" = sentry-logstall ] && continue
		want reject || continue

		write_sentry_reject_policy
		if [ "$peer" = sentry-log ]; then
			printf 'log:\n  access: {enabled: true, output: %s}\n' "$TMP/access-reject.log" >>"$TMP/sentry-reject.yaml"
		fi
		if [ "$peer" = sentry-portable ]; then
			printf 'server:\n  engine: portable\n' >>"$TMP/sentry-reject.yaml"
		fi
		"$bin" check -config "$TMP/sentry-reject.yaml" >&2 ||
			die "sentry check rejected $TMP/sentry-reject.yaml"
		start "$peer-reject" "$bin" run -config "$TMP/sentry-reject.yaml"
		pg=$STARTED_PGID
		wait_http "$peer-reject" "$pg" "${REJECT_PORT[sentry]}"
		check_status "$peer-reject" "${REJECT_PORT[sentry]}" 503
		bench "$peer" reject "${REJECT_PORT[sentry]}" 503 "$pg"
		curl -s -m 2 "http://$HOST:$SENTRY_REJECT_ADMIN_PORT/metrics" >"$OUT/metrics-$peer-reject.txt" 2>/dev/null || true
		stop "$peer-reject" "$pg"
		sentry_log_warnings "$peer-reject"
		;;
	esac
done

stop backend "$BACKEND_PG"

# ---------------------------------------------------------------- report
get() { # get PEER PATH FIELD (2=req/s 3=p50 4=p99 7=requests 8=CPU s)
	local r
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r -a f <<<"$r"
		if [ "${f[0]}" = "$1" ] && [ "${f[1]}" = "$2" ]; then
			echo "${f[$3]}"
			return
		fi
	done
}
eff() { # eff PEER PATH: requests per proxy CPU second, or empty
	local n c
	n=$(get "$1" "$2" 7); c=$(get "$1" "$2" 8)
	[ -n "$n" ] && [ -n "$c" ] && awk -v n="$n" -v c="$c" 'BEGIN { if (c > 0) printf "%.0f", n / c }'
}
ratio() { # ratio A B: A/B with two decimals, or n/a
	if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; else echo n/a; fi
}

{
	echo "## sentry vs peers ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, wrk -t$THREADS -c$CONNS -d${DURATION}s)"
	echo
	echo "| peer | path | req/s | p50 | p99 | non-2xx | socket errors | proxy CPU s | req per CPU s |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r peer path rps p50 p99 non2xx errs reqs cpu <<<"$r"
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$peer" "$path" "$rps" "$p50" "$p99" "$non2xx" "$errs" "$cpu" \
			"$(awk -v n="$reqs" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", n / c; else print "n/a" }')"
	done
	echo
	echo "| ratio | relay | reject |"
	echo "|---|---:|---:|"
	for other in nginx haproxy caddy; do
		if [ -z "$(get "$other" relay 2)$(get "$other" reject 2)" ] || [ -z "$(get sentry relay 2)$(get sentry reject 2)" ]; then continue; fi
		echo "| req/s sentry/$other (higher is better) | $(ratio "$(get sentry relay 2)" "$(get "$other" relay 2)") | $(ratio "$(get sentry reject 2)" "$(get "$other" reject 2)") |"
		echo "| req per CPU s sentry/$other (higher is better) | $(ratio "$(eff sentry relay)" "$(eff "$other" relay)") | $(ratio "$(eff sentry reject)" "$(eff "$other" reject)") |"
		sp=$(get sentry relay 4); op=$(get "$other" relay 4)
		sj=$(get sentry reject 4); oj=$(get "$other" reject 4)
		echo "| p99 sentry/$other (lower is better) | $(ratio "$(to_ms "$sp")" "$(to_ms "$op")") | $(ratio "$(to_ms "$sj")" "$(to_ms "$oj")") |"
	done
	for other in sentry-base sentry-period sentry-log sentry-logstall sentry-portable; do
		if [ -z "$(get "$other" relay 2)" ] || [ -z "$(get sentry relay 2)" ]; then continue; fi
		echo "| req/s $other/sentry | $(ratio "$(get "$other" relay 2)" "$(get sentry relay 2)") | $(ratio "$(get "$other" reject 2)" "$(get sentry reject 2)") |"
		if [ -n "$(get nginx relay 2)" ]; then
			echo "| req/s $other/nginx | $(ratio "$(get "$other" relay 2)" "$(get nginx relay 2)") | $(ratio "$(get "$other" reject 2)" "$(get nginx reject 2)") |"
		fi
	done
	if [ ${#WARNINGS[@]} -gt 0 ]; then
		echo
		echo "Warnings:"
		for w in "${WARNINGS[@]}"; do echo "- $w"; done
	fi
	echo
	versions=$(
		for p in $PEERS; do case $p in
			sentry) printf '; %s' "$("$OUT/sentry" version 2>&1 | head -1)" ;;
			sentry-portable) printf '; sentry with server.engine: portable' ;;
			nginx) printf '; %s' "$(nginx -v 2>&1 | sed 's/^nginx version: //')" ;;
			haproxy) printf '; %s' "$(haproxy -v 2>&1 | head -1 | awk '{print "haproxy " $3}')" ;;
			caddy) printf '; caddy %s' "$(caddy version 2>&1 | awk '{print $1}')" ;;
			esac; done
	)
	echo "Backend: e2e/bench/backend (fasthttp, 128-byte body). Versions: ${versions#; }."
	echo "Load average (1/5/15 min) before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)."
} >"$OUT/peers.md"

cat "$OUT/peers.md"
log "table written to $OUT/peers.md; raw wrk output in $OUT/wrk-*.txt"
