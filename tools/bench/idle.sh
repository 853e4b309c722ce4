#!/bin/sh
# idle.sh: wake-ups of the released daemon at rest (target: none while nothing happens).
# Builds faceagent as released (static, stripped), starts it with the embedded
# broker and 64 configured MQTT terminals, none connected, nothing queued; after 15 s of
# settling, counts the context switches of all its threads (/proc/PID/task/*/status) and its
# CPU ticks (/proc/PID/stat, utime + stime) over 60 s, and prints its RSS.
#
# Usage: tools/bench/idle.sh        (loopback only; everything lives in a temporary directory)
set -eu
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/faceagent" ./agent/cmd/faceagent
port=${IDLE_PORT:-18961}
{
	printf '[agent]\ngateway_id = "idle-gw"\ndata_dir = "%s/data"\n' "$tmp"
	printf '[broker]\nlisten = "127.0.0.1:%s"\nallow_anonymous = true\n[log]\nlevel = "error"\n' "$port"
	for i in $(seq -w 1 64); do printf '[[devices]]\nid = "t%s"\n' "$i"; done
} >"$tmp/agent.toml"
"$tmp/faceagent" -config "$tmp/agent.toml" 2>"$tmp/agent.log" &
pid=$!
sleep 15
if ! kill -0 "$pid" 2>/dev/null; then
	echo "idle.sh: the agent exited:" >&2
	cat "$tmp/agent.log" >&2
	exit 1
fi
switches() { cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
ticks() { awk '{print $14 + $15}' /proc/"$pid"/stat; }
s0=$(switches)
t0=$(ticks)
sleep 60
s1=$(switches)
t1=$(ticks)
echo "idle 60 s: $((s1 - s0)) context switches, $((t1 - t0)) CPU ticks; $(awk '/VmRSS/ {printf "RSS %.1f MB", $2/1024}' /proc/"$pid"/status)"
