package report

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// recordingPublisher keeps what it was asked to publish.
type recordingPublisher struct {
	mu   sync.Mutex
	msgs [][]byte
	got  chan struct{} // poked on every publish
}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{got: make(chan struct{}, 1)}
}

func (p *recordingPublisher) Publish(_ context.Context, _ string, payload []byte) error {
	p.mu.Lock()
	p.msgs = append(p.msgs, payload)
	p.mu.Unlock()
	select {
	case p.got <- struct{}{}:
	default:
	}
	return nil
}

func (p *recordingPublisher) taskIDs(t *testing.T) []string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, len(p.msgs))
	for i, m := range p.msgs {
		r, err := wire.ParseResult(m)
		if err != nil {
			t.Fatalf("published result %q: %v", m, err)
		}
		ids[i] = r.TaskID
	}
	return ids
}

// TestReporterStopWhileGatheringKeepsResult: a result the reporter is still gathering (other
// tasks unfinished) when the agent stops is not lost: it stays in the outbox journal and is
// published by the reporter of the next start.
func TestReporterStopWhileGatheringKeepsResult(t *testing.T) {
	dir := t.TempDir()
	sent := make(chan string, 8)
	sender := outbox.SenderFunc(func(_ context.Context, _ string, c outbox.Command) error {
		sent <- c.MessageID
		return nil
	})
	ob, err := outbox.Open(dir, sender, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := newRecordingPublisher()
	ctx, cancel := context.WithCancel(context.Background())
	rep := NewReporter(ob, ResultOptions{Topic: "r", Logger: slog.New(slog.DiscardHandler)})
	rep.Start(ctx, pub)

	ob.Heartbeat("d1")
	for _, id := range []string{"t-1", "t-2"} {
		err := ob.Enqueue(outbox.Task{MessageID: "m-" + id, TaskID: id, DeviceID: "d1", Op: "AddPerson", PersonID: id, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case id := <-sent:
		ob.Ack("d1", id, 0, "") // t-1 finishes; t-2 is unfinished, so its result gathers
	case <-time.After(10 * time.Second):
		t.Fatal("nothing sent within 10 s")
	}
	cancel()
	rep.Wait()
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	before := pub.taskIDs(t)
	if len(before) > 0 {
		t.Logf("published before the stop (the gathering had ended): %v", before)
		return // reported already: nothing for the next start to publish
	}

	ob, err = outbox.Open(dir, outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	pub = newRecordingPublisher()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	rep = NewReporter(ob, ResultOptions{Topic: "r", Logger: slog.New(slog.DiscardHandler)})
	rep.Start(ctx, pub)
	defer func() { cancel(); rep.Wait() }()
	select {
	case <-pub.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the result gathered at the stop was not published after the restart")
	}
	if ids := pub.taskIDs(t); len(ids) != 1 || ids[0] != "t-1" {
		t.Fatalf("published after the restart: %v, want [t-1]", ids)
	}
}
