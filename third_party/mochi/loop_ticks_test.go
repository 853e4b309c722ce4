// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (idle): Options.LoopTicks drives the event loop in place of its tickers.
//
//	go test -race -run TestLoopTicksDriveTheLoop github.com/mochi-mqtt/server/v2

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// With Options.LoopTicks the loop reads the caller's channels, not tickers of its own, and
// does a task's work when its channel gets a tick: an expired retained message goes once
// LoopRetainedExpiry ticks.
func TestLoopTicksDriveTheLoop(t *testing.T) {
	ticks := NewLoopTicks()
	s := New(&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LoopTicks: ticks})
	t.Cleanup(func() { _ = s.Close() })
	for i, c := range []<-chan time.Time{s.loop.sysTopics.C, s.loop.clientExpiry.C, s.loop.inflightExpiry.C,
		s.loop.retainedExpiry.C, s.loop.willDelaySend.C} {
		if c != ticks.C[i] {
			t.Fatalf("task %d reads a channel of its own, not LoopTicks.C[%d]", i, i)
		}
	}
	if ticks.WillDelayed != s.loop.willDelayed {
		t.Fatal("LoopTicks.WillDelayed is not the server's")
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	s.Topics.RetainMessage(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true},
		ProtocolVersion: 5, TopicName: "r/x", Payload: []byte("m"), Created: time.Now().Unix() - 10,
		Expiry: time.Now().Unix() - 5})
	if n := len(s.Topics.Messages("r/x")); n != 1 {
		t.Fatalf("%d retained messages, want 1", n)
	}
	ticks.C[LoopRetainedExpiry] <- time.Now()
	waitFor(t, "the expired retained message gone", func() bool { return len(s.Topics.Messages("r/x")) == 0 })
}
