#!/usr/bin/env bash
# run-scenarios.sh — run the long versions of sentry's experiment scenarios
# against every peer (sentry, sentry with admission off, HAProxy, nginx).
#
#   e2e/run-scenarios.sh                       # every scenario, every peer, into scenario-out/
#   e2e/run-scenarios.sh fig5 step10x          # some scenarios
#   PEERS=sentry,off OUT=/tmp/out e2e/run-scenarios.sh fig5
#   SCALE=0.5 TIME_SCALE=0.5 e2e/run-scenarios.sh flash   # lighter, shorter
#
# HAProxy and nginx come from Debian packages, installed here only if
# absent (apt-get needs root). They run in the foreground with configs the
# runner generates into the output directory, never through systemd.
# Everything listens on 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-scenario-out}
PEERS=${PEERS:-sentry,off,haproxy,nginx}
SCALE=${SCALE:-1}
TIME_SCALE=${TIME_SCALE:-1}

need=()
case ",$PEERS," in *,haproxy,*) command -v haproxy >/dev/null || need+=(haproxy) ;; esac
case ",$PEERS," in *,nginx,*) command -v nginx >/dev/null || need+=(nginx) ;; esac
if ((${#need[@]})); then
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
		echo "run-scenarios: ${need[*]} missing; install them (apt-get install -y ${need[*]}) or drop them from PEERS" >&2
		echo "run-scenarios: the runner will skip them" >&2
	else
		echo "run-scenarios: installing ${need[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
		# The packages may start their own service; ours run in the
		# foreground on their own ports, so stop the packaged ones.
		for s in "${need[@]}"; do
			if command -v systemctl >/dev/null && systemctl is-active --quiet "$s" 2>/dev/null; then
				systemctl stop "$s" || true
			fi
		done
	fi
fi

if (($#)); then
	names=("$@")
else
	names=(fig5 fig10 flash step10x)
fi
args=()
for n in "${names[@]}"; do
	args+=(-f "e2e/scenarios/${n%.yaml}.yaml")
done

mkdir -p "$OUT/.bin"
go build -o "$OUT/.bin/sentry" ./cmd/sentry
go build -o "$OUT/.bin/scenario" ./e2e/cmd/scenario
"$OUT/.bin/scenario" "${args[@]}" -check -sentry "$OUT/.bin/sentry" -out "$OUT"
exec "$OUT/.bin/scenario" "${args[@]}" -peers "$PEERS" -out "$OUT" -sentry "$OUT/.bin/sentry" \
	-scale "$SCALE" -time-scale "$TIME_SCALE"
