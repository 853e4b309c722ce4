#!/bin/sh
# sdkload.sh: the official Azure IoT Operations Go SDK's statestore client
# (github.com/Azure/iot-operations-sdks, go/services/statestore over go/mqtt's session
# client) against a broker-only faceagent built from this tree. For each in-flight level:
# a fresh data_dir, N requests (SET, GET, DEL in turn, on 16 keys per worker) from that many
# workers sharing one session client, the SDK's default 10 s timeout; a progress line every
# 2 s, then a summary (completed, failed, unanswered, p50/p99 of the completed, and where it
# stalled if nothing completed for 25 s), faceagent's peak RSS (VmHWM, /proc) and the peak
# bytes of its data_dir (sampled every second).
#
# The SDK is not part of this project and nothing is copied into the repository: the
# program below is written and built in $SDKLOAD_DIR against a checkout of the SDK made
# there, with replace directives into that checkout (the Go module proxy provides the
# SDK's own dependencies).
#
# Usage: tools/bench/sdkload.sh [N [INFLIGHT...]]      (default: 100000 8 64)
#   SDK_REPO=DIR        a clone of iot-operations-sdks, or its bare git directory
#                       (default: git clone --depth 1 https://github.com/Azure/iot-operations-sdks)
#   SDK_REV=REV         the revision to check out of SDK_REPO (default HEAD)
#   SDKLOAD_DIR=DIR     where everything is built and run (default /tmp/faceagent-sdkload)
#   SDKLOAD_MAXTIME=5m  stop issuing requests after this long, per level
# Loopback only.
set -eu
cd "$(dirname "$0")/../.."
tree=$(pwd)
n=${1:-100000}
[ $# -gt 0 ] && shift
levels=${*:-8 64}
dir=${SDKLOAD_DIR:-/tmp/faceagent-sdkload}
maxtime=${SDKLOAD_MAXTIME:-5m}
mkdir -p "$dir"

# The SDK, once.
if [ ! -d "$dir/sdk/go/services" ]; then
	rm -rf "$dir/sdk"
	mkdir -p "$dir/sdk"
	if [ -n "${SDK_REPO:-}" ]; then
		git -C "$SDK_REPO" archive "${SDK_REV:-HEAD}" go | tar -x -C "$dir/sdk"
	else
		git clone -q --depth 1 https://github.com/Azure/iot-operations-sdks "$dir/sdk.git"
		git -C "$dir/sdk.git" archive HEAD go | tar -x -C "$dir/sdk"
		rm -rf "$dir/sdk.git"
	fi
fi

mkdir -p "$dir/prog"
cat > "$dir/prog/go.mod" <<'EOF'
module sdkload

go 1.25.0

require (
	github.com/Azure/iot-operations-sdks/go/mqtt v0.4.2
	github.com/Azure/iot-operations-sdks/go/protocol v0.4.3
	github.com/Azure/iot-operations-sdks/go/services v0.4.1
)

replace (
	github.com/Azure/iot-operations-sdks/go/internal => ../sdk/go/internal
	github.com/Azure/iot-operations-sdks/go/mqtt => ../sdk/go/mqtt
	github.com/Azure/iot-operations-sdks/go/protocol => ../sdk/go/protocol
	github.com/Azure/iot-operations-sdks/go/services => ../sdk/go/services
)
EOF
cat > "$dir/prog/main.go" <<'EOF'
// sdkload drives a state store with the official Azure IoT Operations Go SDK's statestore
// client: N requests (SET, GET, DEL in turn) from a number of workers sharing one session
// client, and reports completed, failed, unanswered and latency.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/iot-operations-sdks/go/mqtt"
	"github.com/Azure/iot-operations-sdks/go/protocol"
	"github.com/Azure/iot-operations-sdks/go/services/statestore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "broker host:port")
	n := flag.Int("n", 100000, "requests in all")
	inflight := flag.Int("inflight", 8, "requests in flight (workers)")
	reqTimeout := flag.Duration("req-timeout", 10*time.Second, "per-request timeout (Message Expiry)")
	maxTime := flag.Duration("max-time", 5*time.Minute, "stop issuing after this long")
	stall := flag.Duration("stall", 25*time.Second, "stop when nothing completed for this long")
	id := flag.String("client-id", "sdkload-"+strconv.Itoa(os.Getpid()), "MQTT client id")
	flag.Parse()

	host, portS, err := net.SplitHostPort(*addr)
	check(err)
	port, err := strconv.Atoi(portS)
	check(err)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	app, err := protocol.NewApplication(protocol.WithLogger(quiet))
	check(err)
	mc, err := mqtt.NewSessionClient(*id, mqtt.TCPConnection(host, uint16(port)), mqtt.WithLogger(quiet))
	check(err)
	ss, err := statestore.New[string, string](app, mc, statestore.WithLogger(quiet))
	check(err)
	check(mc.Start())
	ctx := context.Background()
	check(ss.Start(ctx))

	var (
		next, ok, failed atomic.Int64
		mu               sync.Mutex
		lat              []time.Duration
		errs             = map[string]int{}
		lastOK           atomic.Int64 // unix ns of the last success
	)
	start := time.Now()
	lastOK.Store(start.UnixNano())
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	var wg sync.WaitGroup
	for w := range *inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := next.Add(1) - 1
				if i >= int64(*n) {
					return
				}
				key := fmt.Sprintf("sdk/%d/%d", w, i%16)
				t0 := time.Now()
				var err error
				switch i % 3 {
				case 0:
					_, err = ss.Set(ctx, key, "value-"+strconv.FormatInt(i, 10), statestore.WithTimeout(*reqTimeout))
				case 1:
					_, err = ss.Get(ctx, key, statestore.WithTimeout(*reqTimeout))
				default:
					_, err = ss.Del(ctx, key, statestore.WithTimeout(*reqTimeout))
				}
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed.Add(1)
					errs[err.Error()]++
				} else {
					ok.Add(1)
					lat = append(lat, d)
					lastOK.Store(time.Now().UnixNano())
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(2 * time.Second)
	deadline := time.After(*maxTime)
	var stalledAt int64 = -1
	prev, prevT := int64(0), start
loop:
	for {
		select {
		case <-done:
			break loop
		case <-deadline:
			fmt.Fprintf(os.Stderr, "max-time %v reached\n", *maxTime)
			halt()
			<-done
			break loop
		case now := <-tick.C:
			o := ok.Load()
			p50, p99 := pct(&mu, lat)
			fmt.Printf("progress %6.1fs ok=%d failed=%d rate=%.0f/s p50=%v p99=%v\n", now.Sub(start).Seconds(), o, failed.Load(),
				float64(o-prev)/now.Sub(prevT).Seconds(), p50, p99)
			prev, prevT = o, now
			if now.Sub(time.Unix(0, lastOK.Load())) > *stall {
				stalledAt = o
				fmt.Fprintf(os.Stderr, "stalled: nothing completed for %v after %d requests\n", *stall, o)
				halt()
				<-done
				break loop
			}
		}
	}
	el := time.Since(start)
	p50, p99 := pct(&mu, lat)
	issued := min(next.Load(), int64(*n))
	fmt.Printf("summary: client=%s inflight=%d requested=%d issued=%d completed=%d failed=%d unanswered=%d elapsed=%.1fs rate=%.0f/s p50=%v p99=%v",
		*id, *inflight, *n, issued, ok.Load(), failed.Load(), issued-ok.Load(), el.Seconds(), float64(ok.Load())/el.Seconds(), p50, p99)
	if stalledAt >= 0 {
		active := time.Unix(0, lastOK.Load()).Sub(start)
		fmt.Printf(" stalled_after=%d in %.1fs (%.0f/s)", stalledAt, active.Seconds(), float64(stalledAt)/active.Seconds())
	}
	fmt.Println()
	type kv struct {
		k string
		v int
	}
	var es []kv
	for k, v := range errs {
		es = append(es, kv{k, v})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].v > es[j].v })
	for _, e := range es {
		fmt.Printf("  error x%d: %s\n", e.v, e.k)
	}
	ss.Close()
	_ = mc.Stop()
	if ok.Load() != int64(*n) {
		os.Exit(1)
	}
}

func pct(mu *sync.Mutex, lat []time.Duration) (time.Duration, time.Duration) {
	mu.Lock()
	s := append([]time.Duration(nil), lat...)
	mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)*50/100].Round(time.Microsecond), s[min(len(s)-1, len(s)*99/100)].Round(time.Microsecond)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdkload:", err)
		os.Exit(2)
	}
}
EOF
(cd "$dir/prog" && GOWORK=off GOFLAGS=-mod=mod go mod tidy && GOWORK=off go build -o sdkload .)
go build -o "$dir/faceagent" ./agent/cmd/faceagent
echo "sdkload: faceagent $(git -C "$tree" describe --always --dirty 2>/dev/null || echo '?'), SDK from ${SDK_REPO:-github} ${SDK_REV:-HEAD}"

agent_pid=""
sampler_pid=""
cleanup() {
	[ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

status=0
for k in $levels; do
	run="$dir/run-$k"
	rm -rf "$run"
	mkdir -p "$run"
	printf '[agent]\ndata_dir = "%s/data"\n[broker]\nlisten = "127.0.0.1:0"\n' "$run" > "$run/agent.toml"
	"$dir/faceagent" -config "$run/agent.toml" 2> "$run/agent.log" &
	agent_pid=$!
	addr=""
	for _ in $(seq 100); do
		addr=$(sed -n 's/.*msg="faceagent running".* broker=\([^ ]*\).*/\1/p' "$run/agent.log")
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || { cat "$run/agent.log" >&2; exit 1; }
	( while kill -0 "$agent_pid" 2>/dev/null; do du -sb "$run/data" 2>/dev/null | cut -f1; sleep 1; done ) > "$run/disk" &
	sampler_pid=$!
	echo "== $k in flight, $n requests, faceagent pid $agent_pid on $addr"
	"$dir/prog/sdkload" -addr "$addr" -n "$n" -inflight "$k" -max-time "$maxtime" || status=1
	du -sb "$run/data" | cut -f1 >> "$run/disk"
	hwm=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\) kB/\1/p' "/proc/$agent_pid/status")
	kill -TERM "$agent_pid"
	wait "$agent_pid" || true
	agent_pid=""
	kill "$sampler_pid" 2>/dev/null || true
	wait "$sampler_pid" 2>/dev/null || true
	sampler_pid=""
	echo "faceagent: peak RSS (VmHWM) $hwm kB, peak data_dir $(sort -n "$run/disk" | tail -1) bytes"
done
exit $status
