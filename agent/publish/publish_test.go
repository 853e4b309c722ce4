package publish

import (
	"context"
	"errors"
	"testing"
	"time"
)

// scripted is a Pipelined publisher whose messages are answered at once: accepted, or
// refused for the payloads in refuse.
type scripted struct {
	window int
	refuse map[string]bool
	sent   []string
}

type answered struct{ err error }

func (a answered) Wait(context.Context, *time.Timer) error { return a.err }

func (p *scripted) Publish(context.Context, string, []byte) error { return nil }
func (p *scripted) Window() int                                   { return p.window }
func (p *scripted) PublishAsync(_ context.Context, _ string, payload []byte, _ Pending) (Pending, error) {
	p.sent = append(p.sent, string(payload))
	if p.refuse[string(payload)] {
		return answered{errors.New("refused")}, nil
	}
	return answered{}, nil
}

// failing is a plain Publisher that is down.
type failing struct{ calls int }

func (f *failing) Publish(context.Context, string, []byte) error {
	f.calls++
	return errors.New("down")
}

// InOrder reports the prefix before the first refused message, never has more than the
// window outstanding, publishes in order, and counts skipped entries as done.
func TestInOrderStopsAtTheFirstRefusal(t *testing.T) {
	msgs := []string{"0", "1", "skip", "3", "4", "5", "6", "7", "8", "9", "10", "11"}
	p := &scripted{window: 3, refuse: map[string]bool{"5": true, "8": true}}
	n, err := InOrder(context.Background(), p, len(msgs), func(i int) (string, []byte, bool) {
		return "r", []byte(msgs[i]), msgs[i] == "skip"
	})
	if n != 5 || err == nil {
		t.Fatalf("prefix %d, err %v; want 5 and the refusal", n, err)
	}
	// Written in order, the skipped one not at all, and at most a window past the refusal.
	want := []string{"0", "1", "3", "4", "5", "6", "7"}
	if len(p.sent) > len(want) {
		t.Fatalf("sent %v: more than a window past the refused message", p.sent)
	}
	for i, s := range p.sent {
		if s != want[i] {
			t.Fatalf("sent %v, want a prefix of %v", p.sent, want)
		}
	}
	// A publisher without a window (the embedded broker's kind): one by one, the same
	// prefix rule.
	f := &failing{}
	n, err = InOrder(context.Background(), f, 3, func(i int) (string, []byte, bool) { return "r", []byte{'a' + byte(i)}, false })
	if n != 0 || err == nil || f.calls != 1 {
		t.Fatalf("plain publisher: prefix %d, err %v after %d calls; want 0 and the failure after 1", n, err, f.calls)
	}
}

// BatchFor takes a whole window when it is larger than the base.
func TestBatchForCoversTheWindow(t *testing.T) {
	if got := BatchFor(&scripted{window: 100}, 64); got != 100 {
		t.Fatalf("BatchFor(window 100, 64) = %d", got)
	}
	if got := BatchFor(&failing{}, 64); got != 64 {
		t.Fatalf("BatchFor(plain, 64) = %d", got)
	}
}
