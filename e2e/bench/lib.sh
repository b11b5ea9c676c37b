# lib.sh — the process and port handling peers.sh, tls.sh, grpc.sh and idle.sh share, sourced
# after they set HOST, TMP's parent settings and BENCH_TAG (the log prefix).
# Every peer runs in its own process group (start); a trap stops whatever
# is left on any exit and keeps the logs of a failed run.

log() { printf '[%s] %s\n' "$BENCH_TAG" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$BENCH_TAG" "$*" >&2; exit 1; }

# need_tools PEERS -- CMD:PKG...: installs with apt-get (as root, bounded
# in time) the Debian packages of the peers (nginx, haproxy, caddy) and of the
# commands that are missing, then puts /usr/sbin on PATH.
need_tools() {
	local need=() p
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		case "$1" in
		nginx) [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || need+=(nginx) ;;
		haproxy) [ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || need+=(haproxy) ;;
		caddy) command -v caddy >/dev/null || need+=(caddy) ;;
		esac
		shift
	done
	[ $# -gt 0 ] && shift
	for p in "$@"; do
		command -v "${p%%:*}" >/dev/null || need+=("${p#*:}")
	done
	if [ ${#need[@]} -gt 0 ]; then
		[ "$(id -u)" -eq 0 ] || die "missing ${need[*]}; run as root so that apt-get can install them"
		log "installing: ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
		timeout 900 apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
	fi
	export PATH="$PATH:/usr/sbin:/sbin"
}

PGIDS=()
TMP=""
LOAD_PID=""
stop_group() {
	local pg=$1 _
	kill -TERM -- "-$pg" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 -- "-$pg" 2>/dev/null || return 0
		sleep 0.1
	done
	log "process group $pg did not stop on TERM; killing"
	kill -KILL -- "-$pg" 2>/dev/null || true
}
cleanup() {
	local rc=$? pg
	trap - EXIT INT TERM
	if [ -n "$LOAD_PID" ]; then kill -TERM "$LOAD_PID" 2>/dev/null || true; fi
	for pg in "${PGIDS[@]}"; do stop_group "$pg"; done
	wait 2>/dev/null || true
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ "$rc" -ne 0 ]; then log "logs kept in $TMP"; else rm -rf "$TMP"; fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() {
	local name=$1; shift
	setsid "$@" >"$TMP/$name.log" 2>&1 </dev/null &
	STARTED_PGID=$!
	PGIDS+=("$STARTED_PGID")
}
port_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# ports_free PORT...: dies if any is in use.
ports_free() {
	local port
	for port in "$@"; do
		port_free "$port" || die "port $HOST:$port is already in use"
	done
}

# bench_cert: a fresh self-signed P-256 certificate for 127.0.0.1 in
# $TMP (cert.pem, key.pem, and haproxy.pem, the two in one file).
bench_cert() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=sentry-bench" -addext "subjectAltName=IP:127.0.0.1" \
		-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null || die "openssl could not make a certificate"
	cat "$TMP/cert.pem" "$TMP/key.pem" >"$TMP/haproxy.pem"
}
# wait_free PORT: bounded wait until nothing listens on PORT.
wait_free() {
	local _
	for _ in $(seq 50); do port_free "$1" && return 0; sleep 0.1; done
	die "port $HOST:$1 still in use after its peer stopped"
}
# stop NAME PGID [PORT]: stop a peer's process group, keep its log in OUT,
# and with PORT wait until nothing listens there.
stop() {
	local name=$1 pg=$2 port=${3:-} keep=() x
	stop_group "$pg"
	wait "$pg" 2>/dev/null || true
	cp "$TMP/$name.log" "$OUT/log-$name.txt" 2>/dev/null || true
	for x in "${PGIDS[@]}"; do [ "$x" = "$pg" ] || keep+=("$x"); done
	PGIDS=("${keep[@]+"${keep[@]}"}")
	[ -z "$port" ] || wait_free "$port"
}
# cpu_ticks SID: user+system CPU ticks used so far by every process of the
# session SID.
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() {
	local pid total=0 t
	for pid in $(ps -o pid= --sid "$1" 2>/dev/null); do
		t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null) || continue
		total=$((total + ${t:-0}))
	done
	echo "$total"
}
# rss_kb SID: VmRSS summed over every process of the session SID, in KiB.
rss_kb() {
	local pid total=0 r
	for pid in $(ps -o pid= --sid "$1" 2>/dev/null); do
		r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
		total=$((total + ${r:-0}))
	done
	echo "$total"
}
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; else echo n/a; fi; }
