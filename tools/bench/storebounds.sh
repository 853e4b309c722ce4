#!/bin/sh
# storebounds.sh: the faceagent binary's RSS while a client floods its embedded state store
# (docs/benchmarks.md, "State store bounds"). Starts faceagent broker-only (no terminals,
# persist off) on loopback, then prints VmRSS (/proc/PID/status):
#
#   idle        started, nothing connected
#   set         after tools/bench/storeflood wrote N keys of KEY_SIZE bytes (SET)
#   notify      after it registered N KEYNOTIFYs on other keys of KEY_SIZE bytes, over 10
#               connections that stay open (the keys do not exist)
#
# and what the store answered. Defaults: N=1000, KEY_SIZE=1000000 (the largest key a 1 MiB
# packet carries). Extra lines for [broker] come from BROKER_EXTRA, e.g.
#
#   tools/bench/storebounds.sh
#   KEY_SIZE=1024 tools/bench/storebounds.sh                 # keys at store_max_key_size
#   BROKER_EXTRA='store_max_bytes = "8MiB"' tools/bench/storebounds.sh
#
# Loopback only; everything lives in a temporary directory removed at the end.
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
agent_pid=""
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

n=${N:-1000}
key_size=${KEY_SIZE:-1000000}
port=${PORT:-18951}
go build -trimpath -ldflags '-s -w' -o "$tmp/faceagent" ./agent/cmd/faceagent
go build -o "$tmp/storeflood" ./tools/bench/storeflood
{
	printf '[agent]\ndata_dir = "%s/data"\n' "$tmp"
	printf '[broker]\nlisten = "127.0.0.1:%s"\nallow_anonymous = true\npersist = false\n' "$port"
	printf '%s\n' "${BROKER_EXTRA:-}"
	printf '[log]\nlevel = "error"\n[metrics]\nlisten = "127.0.0.1:%s"\n' "$((port + 1))"
} >"$tmp/agent.toml"

rss() { awk '/^VmRSS/ {printf "%.1f MB\n", $2/1024}' "/proc/$1/status"; }

"$tmp/faceagent" -config "$tmp/agent.toml" &
agent_pid=$!
i=0
until curl -sf "http://127.0.0.1:$((port + 1))/healthz" >/dev/null; do
	i=$((i + 1))
	[ "$i" -gt 100 ] && { echo "storebounds.sh: faceagent did not listen" >&2; exit 1; }
	sleep 0.1
done
echo "idle:   $(rss $agent_pid)"
"$tmp/storeflood" -url "mqtt://127.0.0.1:$port" -n "$n" -key-size "$key_size" | sed '/^done/d'
echo "set:    $(rss $agent_pid)"
# The registrations end with their connections: sample while storeflood holds them open
# (it prints "done" once every request was answered).
"$tmp/storeflood" -url "mqtt://127.0.0.1:$port" -n "$n" -key-size "$key_size" -notify -conns 10 -hold 5s >"$tmp/notify.out" &
flood=$!
i=0
until grep -qs '^done' "$tmp/notify.out"; do
	i=$((i + 1))
	[ "$i" -gt 1200 ] && { echo "storebounds.sh: storeflood -notify did not finish" >&2; exit 1; }
	sleep 0.1
done
sed '/^done/d' "$tmp/notify.out"
echo "notify: $(rss $agent_pid)"
wait "$flood"
