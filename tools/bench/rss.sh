#!/bin/sh
# rss.sh: steady RSS of the real faceagent binary with 64 terminals and 10,000 queued tasks
# (issue 7: <= 15 MB). Builds faceagent, facesim and taskctl, starts the agent with its
# embedded broker and 64 configured MQTT terminals, and prints VmRSS (/proc/PID/status):
#
#   idle        started, nothing connected, nothing queued
#   queued      10,000 tasks submitted, no terminal connected (all stay queued)
#   steady      the same 12 s later: the agent has been quiet for more than 5 s and has
#               returned its free heap to the kernel (internal/memtrim)
#   connected   64 facesim terminals connected that ack after 30 s (retry_interval 1m), so about 10,000 - 64
#               tasks stay queued while every terminal has one command in flight
#
# Usage: tools/bench/rss.sh [extra environment for the agent, e.g. GOMEMLIMIT=10MiB]
# Loopback only; everything lives in a temporary directory removed at the end.
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
agent_pid=""
sim_pid=""
cleanup() {
	[ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The daemon as released (make cross): static, stripped.
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/faceagent" ./agent/cmd/faceagent
go build -o "$tmp/facesim" ./tools/facesim
go build -o "$tmp/taskctl" ./tools/taskctl

port=${RSS_PORT:-18931}
ids=""
{
	printf '[agent]\ngateway_id = "rss-gw"\ndata_dir = "%s/data"\n' "$tmp"
	printf '[broker]\nlisten = "127.0.0.1:%s"\nallow_anonymous = true\n' "$port"
	printf '[journal]\nsync = "batch"\n[dispatch]\nretry_interval = "1m"\nbackoff_max = "2m"\n[log]\nlevel = "error"\n'
	for i in $(seq -w 1 64); do
		printf '[[devices]]\nid = "t%s"\n' "$i"
		ids="${ids:+$ids,}t$i"
	done
} >"$tmp/agent.toml"

# VmRSS, and its anonymous part (heap, stacks: what the Go runtime manages and GOMEMLIMIT
# bounds) and file part (the binary's code and data pages).
rss() {
	awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2}
		END {printf "%.1f MB (anon %.1f MB, file %.1f MB)\n", r/1024, a/1024, f/1024}' "/proc/$1/status"
}

run() { # uses $label and $connect (yes: start the 64 terminals)
	rm -rf "$tmp/data"
	env ${AGENT_ENV:-} "$tmp/faceagent" -config "$tmp/agent.toml" 2>"$tmp/agent.log" &
	agent_pid=$!
	sleep 2
	if ! kill -0 "$agent_pid" 2>/dev/null; then
		echo "rss.sh: the agent exited:" >&2
		cat "$tmp/agent.log" >&2
		exit 1
	fi
	echo "$label idle: $(rss $agent_pid)"
	if [ "$connect" = yes ]; then
		"$tmp/facesim" -url "mqtt://127.0.0.1:$port" -devices "$ids" -ack-latency 30s -heartbeat 5s >/dev/null 2>"$tmp/sim.log" &
		sim_pid=$!
		sleep 2
	fi
	"$tmp/taskctl" submit -url "mqtt://127.0.0.1:$port" -gateway rss-gw -generate 10000 -devices 64 \
		-device-prefix t -no-follow >/dev/null
	sleep 3
	echo "$label queued (terminals connected: $connect): $(rss $agent_pid)"
	sleep 9
	echo "$label steady, 12 s later: $(rss $agent_pid)"
	[ -n "$sim_pid" ] && kill "$sim_pid" && wait "$sim_pid" 2>/dev/null || true
	sim_pid=""
	kill "$agent_pid"
	wait "$agent_pid" 2>/dev/null || true
	agent_pid=""
}
AGENT_ENV="$*"
label="[${AGENT_ENV:-default}]" connect=no run
label="[${AGENT_ENV:-default}]" connect=yes run
