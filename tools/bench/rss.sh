#!/bin/sh
# rss.sh: steady RSS of the real faceagent binary with 64 terminals and 10,000 queued tasks
# (target <= 15 MB). Builds faceagent, facesim and taskctl, starts the agent with its
# embedded broker and 64 configured MQTT terminals, and prints VmRSS (/proc/PID/status):
#
#   idle        started, nothing connected, nothing queued
#   queued      10,000 tasks submitted, no terminal connected (all stay queued)
#   steady      the same 12 s later (20 s under qemu): the agent has been quiet for more
#               than 5 s and has returned its free heap to the kernel (internal/memtrim)
#   connected   64 facesim terminals connected that ack after 30 s (retry_interval 1m), so about 10,000 - 64
#               tasks stay queued while every terminal has one command in flight
#
# After the steady sample it prints the Go runtime's memory classes from the agent's /metrics
# (heap objects, fragmentation, free, stacks, runtime metadata).
#
# Usage: tools/bench/rss.sh [extra environment for the agent, e.g. GOMEMLIMIT=10MiB]
#        RSS_ARCH=arm tools/bench/rss.sh    (or arm64) the ARM build under qemu-user
#        RSS_DESIRED=site tools/bench/rss.sh    (or distinct) with desired whitelists
#
# RSS_DESIRED gives the 64 terminals desired whitelists of 10,000 persons before the agent
# starts (tools/bench/wlfootprint -phase fill into data_dir/whitelist, as 64 SetWhitelists
# would leave them): site, every terminal the same list; distinct, each its own (with
# [whitelist] max_records raised to hold them). The agent replays them at start and keeps
# them; compare with a run without RSS_DESIRED for what they add.
#
# Under qemu-user the process is qemu, whose own memory (its translation cache) says nothing
# about the agent's. RSS_ARCH prints instead an estimate of the agent's RSS on the board: the
# resident pages of the agent's image (from /proc/PID/smaps; qemu maps the guest ELF from the
# file like the kernel does) plus the memory the Go runtime accounts for (heap spans in use,
# stacks, runtime metadata). On the native build that sum over-counts the anonymous RSS by
# ~2.5 MB (metadata reserved but not touched), so the estimate errs high.
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
arch=${RSS_ARCH:-}
case "$arch" in
# Emulation is slower: start-up takes longer, and so does the intake of the burst, after which
# the agent must be quiet for 5 s before it returns its free heap. The steady sample must come
# before the terminals' first acks (30 s after their first commands) start the next round.
"") runner="" startwait=2 steadywait=9 ;;
arm) runner=qemu-arm-static startwait=6 steadywait=17 ;;
arm64) runner=qemu-aarch64-static startwait=6 steadywait=17 ;;
*) echo "rss.sh: RSS_ARCH must be arm or arm64" >&2; exit 2 ;;
esac
CGO_ENABLED=0 GOOS=linux GOARCH=${arch:-$(go env GOARCH)} GOARM=7 go build -trimpath -ldflags '-s -w' -o "$tmp/faceagent" ./agent/cmd/faceagent
go build -o "$tmp/facesim" ./tools/facesim
go build -o "$tmp/taskctl" ./tools/taskctl
desired=${RSS_DESIRED:-}
case "$desired" in
"") ;;
site) go build -o "$tmp/wlfootprint" ./tools/bench/wlfootprint ;;
# 640,000 records take the agent seconds to replay before its broker listens.
distinct) go build -o "$tmp/wlfootprint" ./tools/bench/wlfootprint && startwait=$((startwait + 20)) ;;
*) echo "rss.sh: RSS_DESIRED must be site or distinct" >&2; exit 2 ;;
esac

port=${RSS_PORT:-18931}
metrics_port=$((port + 1))
ids=""
{
	printf '[agent]\ngateway_id = "rss-gw"\ndata_dir = "%s/data"\n' "$tmp"
	printf '[broker]\nlisten = "127.0.0.1:%s"\nallow_anonymous = true\n' "$port"
	[ "$desired" = distinct ] && printf '[whitelist]\nmax_records = 700000\n'
	printf '[journal]\nsync = "batch"\n[dispatch]\nretry_interval = "1m"\nbackoff_max = "2m"\n[log]\nlevel = "error"\n[metrics]\nlisten = "127.0.0.1:%s"\n' "$metrics_port"
	for i in $(seq -w 1 64); do
		printf '[[devices]]\nid = "t%s"\n' "$i"
		ids="${ids:+$ids,}t$i"
	done
} >"$tmp/agent.toml"

# VmRSS, and its anonymous part (heap, stacks: what the Go runtime manages and GOMEMLIMIT
# bounds) and file part (the binary's code and data pages).
rss() {
	if [ -n "$runner" ]; then
		image=$(awk '$0 ~ /\/faceagent$/ {m=1; next} /^[0-9a-f]+-/ {m=0} m && /^Rss:/ {s+=$2} END {print s+0}' "/proc/$1/smaps")
		gomem=$(classes | awk '$1 ~ /heap_objects|heap_unused|heap_free|stacks|runtime/ {s+=$2} END {print s/1024}')
		awk -v i="$image" -v g="$gomem" 'BEGIN {printf "estimate %.1f MB (image %.1f MB, Go memory %.1f MB)\n", (i+g)/1024, i/1024, g/1024}'
		return
	fi
	awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2}
		END {printf "%.1f MB (anon %.1f MB, file %.1f MB)\n", r/1024, a/1024, f/1024}' "/proc/$1/status"
}

# classes prints "class bytes" for each of the runtime's memory classes the agent exports.
classes() {
	curl -s "http://127.0.0.1:$metrics_port/metrics" |
		sed -n 's/^faceagent_go_memory_bytes{class="\([a-z_]*\)"} \(.*\)$/\1 \2/p' |
		awk '{printf "%s %.0f\n", $1, $2}'
}

run() { # uses $label and $connect (yes: start the 64 terminals)
	rm -rf "$tmp/data"
	if [ -n "$desired" ]; then
		mkdir -p "$tmp/data"
		"$tmp/wlfootprint" -phase fill -case "$desired" -dir "$tmp/data/whitelist" -prefix t >/dev/null
	fi
	env ${AGENT_ENV:-} $runner "$tmp/faceagent" -config "$tmp/agent.toml" 2>"$tmp/agent.log" &
	agent_pid=$!
	sleep "$startwait"
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
	sleep "$steadywait"
	echo "$label steady, $((steadywait + 3)) s later: $(rss $agent_pid)"
	echo "$label Go memory classes (MB): $(classes | awk '{printf "%s %.2f  ", $1, $2/1048576}')"
	[ -n "$sim_pid" ] && kill "$sim_pid" && wait "$sim_pid" 2>/dev/null || true
	sim_pid=""
	kill "$agent_pid"
	wait "$agent_pid" 2>/dev/null || true
	agent_pid=""
}
AGENT_ENV="$*"
label="[${AGENT_ENV:-default}${desired:+, desired $desired}]" connect=no run
label="[${AGENT_ENV:-default}${desired:+, desired $desired}]" connect=yes run
