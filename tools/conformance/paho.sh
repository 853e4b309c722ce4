#!/bin/bash
# paho.sh: runs the Eclipse Paho MQTT 5 interoperability suite (eclipse/paho.mqtt.testing,
# interoperability/client_test5.py: Python 3, standard library only) against a broker-only
# faceagent, or against upstream mochi-mqtt v2.7.9 for comparison, and prints each test's
# result per run and how many runs each test passed.
#
# Usage: tools/conformance/paho.sh [-u | -U] [-n RUNS] [-p PORT] SUITE_DIR   (-h: this help)
#   SUITE_DIR  a checkout of eclipse/paho.mqtt.testing (never copied into this repository)
#   -n RUNS    runs of the whole suite, each against a newly started broker (default 3)
#   -p PORT    loopback port of the broker (default 18931)
#   -u         upstream mochi v2.7.9 instead, with NoInheritedPropertiesOnAck as faceagent sets
#              it (otherwise a PUBACK echoes the PUBLISH's user properties, which the suite's
#              client rejects, and some tests then wait forever), anonymous clients, an ACL
#              refusing subscriptions to test/nosubscribe, and Server Keep Alive 60 s for
#              clients asking 0 or more than 60 (a small main built in a temporary directory
#              from the Go module proxy; nothing of it enters this repository or its go.mod)
#   -U         as -u, plus the other compatibility settings of upstream's
#              examples/paho.testing (ObscureNotAuthorized, PassiveClientDisconnect)
#
# faceagent runs with a config that makes the suite's assumptions hold as far as its
# settings can: anonymous clients and [broker] server_keep_alive = "60s" (the suite's
# test_server_keep_alive asks 120 and wants 60). The users file's rules are lists of what is
# allowed: no rule set refuses test/nosubscribe while allowing "#", which the suite
# subscribes to when it clears retained messages, so test_subscribe_failure fails (it also
# wants SUBACK 0x80, where faceagent answers a refused filter with 0x87 Not authorized).
#
# Example: git clone https://github.com/eclipse/paho.mqtt.testing /tmp/paho
#          tools/conformance/paho.sh -n 5 /tmp/paho
#          tools/conformance/paho.sh -u -n 5 /tmp/paho
set -eu

usage() { sed -n '2,/^set -eu/p' "$0" | sed 's/^# \{0,1\}//;$d'; }
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
	usage
	exit 0
fi
runs=3 port=18931 upstream=""
while getopts "n:p:uU" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	p) port=$OPTARG ;;
	u) upstream=plain ;;
	U) upstream=compat ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -ne 1 ] || [ ! -f "$1/interoperability/client_test5.py" ]; then
	echo "paho.sh: want the path of a paho.mqtt.testing checkout (with interoperability/client_test5.py)" >&2
	exit 2
fi
suite=$(cd "$1/interoperability" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

if [ -z "$upstream" ]; then
	(cd "$repo" && go build -o "$tmp/broker" ./agent/cmd/faceagent)
	name="faceagent $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?')"
	start() {
		rm -rf "$tmp/data"
		printf '[agent]\ndata_dir = "%s/data"\n[broker]\nlisten = "127.0.0.1:%s"\nallow_anonymous = true\nserver_keep_alive = "60s"\n[log]\nlevel = "error"\n' \
			"$tmp" "$port" >"$tmp/broker.toml"
		"$tmp/broker" -config "$tmp/broker.toml" 2>"$tmp/broker.log" &
		pid=$!
	}
else
	mkdir "$tmp/mochi"
	cat >"$tmp/mochi/main.go" <<'EOF'
// Command mochi-paho serves upstream mochi-mqtt for the Paho MQTT 5 interoperability suite.
package main

import (
	"bytes"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:1883", "address")
	compat := flag.Bool("compat", false, "the other compatibilities of upstream's examples/paho.testing")
	flag.Parse()
	server := mqtt.New(&mqtt.Options{InlineClient: true})
	server.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck = true // as faceagent
	if *compat {
		server.Options.Capabilities.Compatibilities.ObscureNotAuthorized = true
		server.Options.Capabilities.Compatibilities.PassiveClientDisconnect = true
	}
	_ = server.AddHook(new(hook), nil)
	if err := server.AddListener(listeners.NewTCP(listeners.Config{ID: "t1", Address: *addr})); err != nil {
		log.Fatal(err)
	}
	if err := server.Serve(); err != nil {
		log.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	_ = server.Close()
}

// hook lets everyone in, refuses subscriptions to test/nosubscribe, and holds a client
// asking for keep-alive 0 or more than 60 s to 60 s (Server Keep Alive in CONNACK).
type hook struct{ mqtt.HookBase }

func (h *hook) ID() string { return "paho" }

func (h *hook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnConnectAuthenticate, mqtt.OnConnect, mqtt.OnACLCheck}, []byte{b})
}

func (h *hook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (h *hook) OnACLCheck(_ *mqtt.Client, topic string, _ bool) bool {
	return topic != "test/nosubscribe"
}

func (h *hook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	if pk.Connect.Keepalive == 0 || pk.Connect.Keepalive > 60 {
		cl.State.Keepalive = 60
		cl.State.ServerKeepalive = true
	}
	return nil
}
EOF
	printf 'module mochipaho\n\ngo 1.22\n' >"$tmp/mochi/go.mod"
	(cd "$tmp/mochi" && GOFLAGS=-mod=mod go get github.com/mochi-mqtt/server/v2@v2.7.9 >/dev/null 2>&1 &&
		GOFLAGS=-mod=mod go build -o "$tmp/broker" .)
	name="mochi v2.7.9 ($([ "$upstream" = compat ] && echo "-U: examples/paho.testing settings" || echo "-u: NoInheritedPropertiesOnAck"))"
	flags=""
	[ "$upstream" = compat ] && flags=-compat
	start() {
		"$tmp/broker" -listen "127.0.0.1:$port" $flags >"$tmp/broker.log" 2>&1 &
		pid=$!
	}
fi

# listening waits up to 10 s for the broker's port.
listening() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "paho.sh: nothing listens on 127.0.0.1:$port:" >&2
	cat "$tmp/broker.log" >&2
	return 1
}

echo "# $name, $runs runs of $suite/client_test5.py $(git -C "$suite" log -1 --format=%h 2>/dev/null || true)"
for run in $(seq "$runs"); do
	start
	listening
	# unittest -v lists every test; the FAIL:/ERROR: headers of its report name the failures.
	(cd "$suite" && timeout 900 python3 -W ignore client_test5.py -v -p "$port") >"$tmp/run$run.log" 2>&1 || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
	sed -n 's/^\(test_[a-z0-9_]*\) (.*$/\1/p' "$tmp/run$run.log" | sort -u >"$tmp/tests"
	sed -n 's/^\(FAIL\|ERROR\): \(test_[a-z0-9_]*\) .*/\2 \1/p' "$tmp/run$run.log" | sort -u >"$tmp/bad$run"
	if [ ! -s "$tmp/tests" ]; then
		echo "paho.sh: run $run listed no tests:" >&2
		tail -20 "$tmp/run$run.log" >&2
		exit 1
	fi
	echo "run $run: $(($(wc -l <"$tmp/tests") - $(wc -l <"$tmp/bad$run"))) of $(wc -l <"$tmp/tests") passed; failed: $(awk '{printf "%s%s(%s)", sep, $1, $2; sep=" "}' "$tmp/bad$run")"
done
echo "| test | passed |"
echo "|---|---|"
while read -r t; do
	bad=$(cat "$tmp"/bad* | grep -c "^$t " || true)
	echo "| $t | $((runs - bad))/$runs |"
done <"$tmp/tests"
