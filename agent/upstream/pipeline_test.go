package upstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// taskLog is a Tasks that keeps the payloads it accepts and refuses while refuse is set.
type taskLog struct {
	mu       sync.Mutex
	got      []string
	refused  int
	refuse   bool
	accepted chan struct{} // signalled on every call
}

func newTaskLog() *taskLog { return &taskLog{accepted: make(chan struct{}, 1)} }

func (l *taskLog) Accept(_ context.Context, payload []byte) error {
	l.mu.Lock()
	defer func() {
		l.mu.Unlock()
		select {
		case l.accepted <- struct{}{}:
		default:
		}
	}()
	if l.refuse {
		l.refused++
		return fmt.Errorf("refused %s", payload)
	}
	l.got = append(l.got, string(payload))
	return nil
}

// testOptions are the options the agent gives a connection to addr with its defaults
// (keep-alive 30s, connect timeout 10s) for gateway gw-p, a session kept for an hour and
// reconnects at most 200ms apart.
func testOptions(addr string, window int, tasks Tasks) *Options {
	return &Options{
		URL: "mqtt://" + addr, ClientID: "faceagent-gw-p", KeepAlive: 30 * time.Second,
		ConnectTimeout: 10 * time.Second, SessionExpiry: time.Hour, ReconnectMax: 200 * time.Millisecond,
		PublishWindow: window, TasksTopic: "faceagent/gw-p/tasks", Tasks: tasks,
	}
}

// dialTestUpstream connects with testOptions to the broker at addr with the given publish
// window, and waits until the tasks are subscribed.
func dialTestUpstream(t testing.TB, addr string, window int) *Conn {
	t.Helper()
	return dialWith(t, testOptions(addr, window, newTaskLog()))
}

// dialWith dials with o (Connected set here) and waits until the tasks are subscribed;
// the connection is closed when t ends.
func dialWith(t testing.TB, o *Options) *Conn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	o.Connected = first
	uc, err := Dial(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = uc.Close(sctx)
		cancel()
	})
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream connection did not come up")
	}
	return uc
}

func numbered(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"taskId":"t-%05d","status":"succeeded"}`, i)
	}
	return out
}

// firstCopies checks that got holds every one of want, and that the first copy of each
// arrived in want's order (duplicates after a reconnect are allowed).
func firstCopies(t *testing.T, got []string, want [][]byte) {
	t.Helper()
	seen := map[string]bool{}
	next := 0
	for _, g := range got {
		if seen[g] {
			continue
		}
		seen[g] = true
		if next >= len(want) || g != string(want[next]) {
			t.Fatalf("first copy %d is %s, want %s", next, g, want[min(next, len(want)-1)])
		}
		next++
	}
	if next != len(want) {
		t.Fatalf("%d of %d messages arrived", next, len(want))
	}
}

// Across a link with a 40 ms round trip, the stream keeps its window of messages in
// flight — the proxy between the agent and mosquitto sees that many PUBLISH packets
// before the first PUBACK comes back, and never more — and the subscriber gets them in
// order. With a window of 1 it is one message per round trip.
func TestPipelinedPublishKeepsItsWindowInFlight(t *testing.T) {
	m := testutil.StartMosquitto(t)
	for _, tc := range []struct{ window, n int }{{64, 400}, {1, 10}} {
		t.Run(fmt.Sprintf("window=%d", tc.window), func(t *testing.T) {
			proxy := testutil.StartDelayProxy(t, m.Addr, 20*time.Millisecond)
			topic := fmt.Sprintf("faceagent/gw-p/results-%d", tc.window)
			sub := testutil.SubscribeInOrder(t, m.Addr, topic)
			uc := dialTestUpstream(t, proxy.Addr(), tc.window)
			msgs := numbered(tc.n)
			n, err := publish.InOrder(context.Background(), uc, len(msgs), func(i int) (string, []byte, bool) {
				return topic, msgs[i], false
			})
			if err != nil || n != len(msgs) {
				t.Fatalf("published %d of %d: %v", n, len(msgs), err)
			}
			before, peak, _ := proxy.Counts()
			t.Logf("window %d: %d PUBLISH before the first PUBACK, at most %d in flight", tc.window, before, peak)
			if peak > tc.window {
				t.Errorf("%d messages were in flight at once, over the window of %d", peak, tc.window)
			}
			if tc.window == 1 && (before != 1 || peak != 1) {
				t.Errorf("window 1: %d sent before the first PUBACK, %d in flight at most; want 1 and 1", before, peak)
			}
			// The first PUBACK is 40 ms away; writing 64 messages takes far less, even
			// with the race detector on a busy machine.
			if tc.window > 1 && before < tc.window/2 {
				t.Errorf("only %d messages were sent before the first PUBACK; the window is %d", before, tc.window)
			}
			waitFor(t, "every message at the subscriber", func() bool { return len(sub.Received()) >= len(msgs) }, sub.Changed())
			got := sub.Received()
			if len(got) != len(msgs) {
				t.Fatalf("the subscriber got %d messages, want %d", len(got), len(msgs))
			}
			for i, g := range got {
				if g != string(msgs[i]) {
					t.Fatalf("message %d is %s, want %s", i, g, msgs[i])
				}
			}
		})
	}
}

// The upstream broker (mosquitto, which keeps no sessions across a restart) restarts
// while a stream has a window of messages in flight: their PUBACKs never come, the session
// is gone on reconnect, and the stream sends everything from the first unacknowledged
// message again, as every report stream does (publish.InOrder from the first message not
// accepted). Every message arrives, the first copies in order, and every one is accepted
// in the end. The proxy stops the agent's bytes first and the test lets the subscriber
// take what the broker already has, since a broker without persistence loses what it
// acknowledged but had not yet delivered when it stops.
func TestPipelinedPublishSurvivesUpstreamRestart(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := testutil.StartDelayProxy(t, m.Addr, 5*time.Millisecond)
	const topic = "faceagent/gw/deadletter"
	sub := testutil.SubscribeInOrder(t, m.Addr, topic)
	uc := dialTestUpstream(t, proxy.Addr(), defaultPublishWindow)

	msgs := numbered(2000)
	var accepted atomic.Int64
	type outcome struct {
		failures int
		err      error
	}
	streamed := make(chan outcome, 1)
	go func() {
		failures, err := publishAll(uc, topic, msgs, &accepted)
		streamed <- outcome{failures, err}
	}()
	waitFor(t, "a third of the messages", func() bool { return len(sub.Received()) >= len(msgs)/3 }, sub.Changed())
	proxy.Hold()
	pollUntil(t, "the subscriber to get what reached the broker", func() bool {
		_, _, forwarded := proxy.Counts()
		return len(sub.Received()) >= forwarded
	})
	if _, peak, _ := proxy.Counts(); peak < 2 {
		t.Errorf("at most %d messages were in flight; the stream is not pipelined", peak)
	}
	before := sub.Received()
	sub.Close()
	m.Restart()
	sub2 := testutil.SubscribeInOrder(t, m.Addr, topic)
	proxy.Release()
	select {
	case o := <-streamed:
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.failures == 0 {
			t.Error("no round failed: the restart lost nothing in flight, and nothing was sent again")
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d messages accepted after a minute", accepted.Load(), len(msgs))
	}
	waitFor(t, "the rest at the new subscriber", func() bool {
		seen := map[string]bool{}
		for _, g := range append(before, sub2.Received()...) {
			seen[g] = true
		}
		return len(seen) == len(msgs)
	}, sub2.Changed())
	got := append(before, sub2.Received()...)
	t.Logf("%d before the restart, %d after (%d duplicates)", len(before), len(got)-len(before), len(got)-len(msgs))
	firstCopies(t, got, msgs)
}

// publishAll publishes msgs on topic in order as a report stream does: batches of a
// window through publish.InOrder and, after a failure, again from the first message not
// accepted, 100ms later. accepted counts the contiguous prefix accepted. It returns how
// many rounds failed, and gives up after 1,000 failed rounds or a minute.
func publishAll(uc *Conn, topic string, msgs [][]byte, accepted *atomic.Int64) (failures int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := 0
	for done < len(msgs) {
		batch := msgs[done:min(len(msgs), done+publish.BatchFor(uc, 1))]
		n, err := publish.InOrder(ctx, uc, len(batch), func(i int) (string, []byte, bool) {
			return topic, batch[i], false
		})
		done += n
		accepted.Store(int64(done))
		if err == nil {
			continue
		}
		if failures++; failures > 1000 || ctx.Err() != nil {
			return failures, fmt.Errorf("%d of %d accepted: %w", done, len(msgs), err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // the stream's retry delay, not a wait for an event
		case <-ctx.Done():
		}
	}
	return failures, nil
}

// A broker that allows fewer messages in flight (its Receive Maximum, here the embedded
// mochi broker's with 8) than the window gets no more than that: paho waits for a free
// slot, and the broker, which disconnects a client over its quota, takes every message.
func TestPipelinedPublishHonoursReceiveMaximum(t *testing.T) {
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	br.Server().Options.Capabilities.ReceiveMaximum = 8
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	proxy := testutil.StartDelayProxy(t, br.Addr(), 10*time.Millisecond)
	uc := dialTestUpstream(t, proxy.Addr(), 64)
	msgs := numbered(200)
	n, err := publish.InOrder(context.Background(), uc, len(msgs), func(i int) (string, []byte, bool) {
		return "faceagent/gw-p/results", msgs[i], false
	})
	if err != nil || n != len(msgs) {
		t.Fatalf("published %d of %d: %v", n, len(msgs), err)
	}
	before, peak, _ := proxy.Counts()
	t.Logf("%d PUBLISH before the first PUBACK, at most %d in flight", before, peak)
	if peak > 8 || before > 8 {
		t.Errorf("%d in flight, %d before the first PUBACK: over the broker's Receive Maximum of 8", peak, before)
	}
	if peak < 4 {
		t.Errorf("at most %d in flight; the window should fill the broker's 8", peak)
	}
}
