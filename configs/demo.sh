#!/bin/sh
# `make demo`: the embedded default on one machine with only Go installed.
# Builds faceagent, facesim, taskctl and sscli, starts the agent with configs/demo.toml (its own
# broker and state store), eight simulated terminals in four groups (fast, slow, lossy,
# offline for a while), submits configs/demo-tasks.jsonl with a live progress bar per
# terminal, prints the summary, then reads every terminal's state back from the state
# store with sscli (faceagent/demo-gw/devices/{id}, msgp, decoded to JSON). Then it
# factory-resets term-01 (facesim -stdin, through a FIFO) and shows the agent noticing the
# drift and repairing it: the sync reports (taskctl watch-sync), the agent's log lines, and
# the terminal in sync again (taskctl states). Logs stay in /tmp/faceagent-demo. The agent and
# the terminals keep running for the operator's page until Enter (on a terminal) or for
# DEMO_HOLD seconds (otherwise; default 0: the demo ends at once).
set -eu
GO=${GO:-go}
DEMO=/tmp/faceagent-demo
URL=mqtt://127.0.0.1:18830
rm -rf "$DEMO"
mkdir -p "$DEMO/bin"
echo "== building faceagent, facesim, taskctl, sscli"
"$GO" build -o "$DEMO/bin/" ./agent/cmd/faceagent ./tools/facesim ./tools/taskctl ./tools/sscli

pids=""
# term-01's group reads facesim control commands from this FIFO; fd 3 holds it open for
# writing, so facesim neither waits at start nor sees the end of its input early.
mkfifo "$DEMO/ctl-fast"
exec 3<>"$DEMO/ctl-fast"
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

# The operator's page acts with a token: a fresh one in $DEMO/ui-token, named in a copy of
# the config.
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$DEMO/ui-token"
sed "s|^\[ui\]\$|[ui]\ntoken_file = \"$DEMO/ui-token\"|" configs/demo.toml >"$DEMO/agent.toml"
echo "== starting faceagent -config $DEMO/agent.toml (configs/demo.toml with a page token; log: $DEMO/faceagent.log)"
"$DEMO/bin/faceagent" -config "$DEMO/agent.toml" 2>"$DEMO/faceagent.log" &
pids="$pids $!"
# Wait for the broker to listen (the agent logs its address when it is ready).
i=0
until grep -q '"faceagent running"\|msg="faceagent running"' "$DEMO/faceagent.log" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 300 ]; then echo "faceagent did not start:"; cat "$DEMO/faceagent.log"; exit 1; fi
	sleep 0.1
done

echo "== operator's page: http://127.0.0.1:19108/ (token: $(cat "$DEMO/ui-token"); it stays up at the end until you press Enter)"

echo "== starting 8 simulated terminals (log: $DEMO/facesim-*.log)"
sim() { # name, devices, flags...; standard input from $DEMO/ctl-NAME when that FIFO exists
	name=$1 devs=$2
	shift 2
	in=/dev/null
	if [ -p "$DEMO/ctl-$name" ]; then in="$DEMO/ctl-$name"; fi
	"$DEMO/bin/facesim" -url "$URL" -devices "$devs" -heartbeat 1s -strict -summary 0 "$@" \
		<"$in" >"$DEMO/facesim-$name.log" 2>&1 &
	pids="$pids $!"
}
sim fast term-01,term-02,term-03,term-04 -ack-latency exp:20ms -seed 1 -stdin
sim slow term-05,term-06 -ack-latency normal:300ms,80ms -seed 2
sim lossy term-07 -ack-latency exp:30ms -ack-loss 0.2 -seed 3
sim offline term-08 -ack-latency exp:30ms -offline-every 6s -offline-for 4s -seed 4

echo "== submitting configs/demo-tasks.jsonl"
"$DEMO/bin/taskctl" submit -url "$URL" -gateway demo-gw -batch 10 -timeout 3m configs/demo-tasks.jsonl
# The agent writes each terminal's state at most once a second: let the last writes land.
sleep 1.5
echo
# The store has no KEYS command: the terminals are the ones configs/demo.toml lists.
echo "== device states read back from the state store:"
echo "   sscli --url $URL get --decode auto --compact faceagent/demo-gw/devices/{id}"
for id in $(sed -n 's/^id = "\(.*\)"$/\1/p' configs/demo.toml); do
	"$DEMO/bin/sscli" --url "$URL" get --decode auto --compact "faceagent/demo-gw/devices/$id"
done
echo

echo "== factory reset of term-01: it forgets every person; the agent notices the drift and repairs it"
"$DEMO/bin/taskctl" watch-sync -url "$URL" -gateway demo-gw -timeout 1m term-01 >"$DEMO/watch-sync.log" 2>&1 &
watcher=$!
i=0
until grep -q '^watching' "$DEMO/watch-sync.log" 2>/dev/null; do # subscribed before the reset
	i=$((i + 1))
	if [ $i -gt 100 ]; then cat "$DEMO/watch-sync.log"; exit 1; fi
	sleep 0.1
done
echo "   facesim (stdin): reset term-01"
echo "reset term-01" >&3
synced=0
wait "$watcher" || synced=$?
echo "   the agent's log:"
grep 'device=term-01' "$DEMO/faceagent.log" | grep 'whitelist drift\|reconciliation started\|reconciliation done\|reconciliation failed' |
	sed 's/^/     /'
echo "   sync reports (taskctl watch-sync -url $URL -gateway demo-gw term-01):"
sed 's/^/     /' "$DEMO/watch-sync.log"
if [ "$synced" -ne 0 ]; then echo "term-01 was not repaired"; exit 1; fi
# In sync once a heartbeat shows the desired digest and the agent wrote the state (1 s).
i=0
until "$DEMO/bin/taskctl" states -config configs/demo.toml term-01 | awk 'NR == 2 && $9 == "true" { ok = 1 } END { exit !ok }'; do
	i=$((i + 1))
	if [ $i -gt 50 ]; then break; fi
	sleep 0.2
done
echo "   taskctl states -config configs/demo.toml term-01:"
"$DEMO/bin/taskctl" states -config configs/demo.toml term-01 | sed 's/^/     /'
echo
echo "metrics: http://127.0.0.1:19108/metrics and the operator's page http://127.0.0.1:19108/ while the agent runs; logs in $DEMO"
if [ -t 0 ]; then
	echo "the agent and the terminals keep running for the page (token: $(cat "$DEMO/ui-token")): press Enter to stop them"
	read -r _ || true
elif [ "${DEMO_HOLD:-0}" -gt 0 ]; then
	echo "the agent and the terminals keep running for the page for ${DEMO_HOLD}s (DEMO_HOLD)"
	sleep "$DEMO_HOLD"
fi
