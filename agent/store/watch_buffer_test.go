package store

import (
	"fmt"
	"testing"
)

// TestWatchBufferDropsOldest: a Watch whose reader stops reading keeps at most WatchBuffer
// notifications: the oldest are dropped and the oldest one kept is marked Resync, so memory
// stays bounded and the latest state still arrives.
func TestWatchBufferDropsOldest(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	c := connect(t, url, func(o *Options) { o.WatchBuffer = 4 })
	writer := connect(t, url, nil)
	ctx := ctxT(t)
	// The lazy Watch comes first: each notification reaches it before the active one, so
	// once the active reader has the last change, the lazy queue has had every push.
	lazy, err := c.KeyNotify(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	active, err := c.KeyNotify(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	const changes = 10
	for i := range changes {
		if _, err := writer.Set(ctx, "hot", []byte(fmt.Sprint(i)), nil); err != nil {
			t.Fatal(err)
		}
		// The active reader keeps up (its buffer is as small as the lazy one's).
		if n := next(t, active); string(n.Value) != fmt.Sprint(i) || n.Resync {
			t.Fatalf("active reader: %+v, want change %d", n, i)
		}
	}

	var got []Notification
	for len(got) == 0 || string(got[len(got)-1].Value) != fmt.Sprint(changes-1) {
		got = append(got, next(t, lazy))
	}
	// The queue kept the last four; the pump may have held one older notification when
	// the reader stopped.
	if len(got) < 4 || len(got) > 5 {
		t.Fatalf("lazy reader got %d notifications %+v, want the last 4 (and at most one older)", len(got), got)
	}
	tail := got[len(got)-4:]
	for i, n := range tail {
		want := fmt.Sprint(changes - 4 + i)
		if string(n.Value) != want || n.Resync != (i == 0) {
			t.Errorf("kept notification %d: value %q resync %v, want %q resync %v", i, n.Value, n.Resync, want, i == 0)
		}
	}
	if len(got) == 5 {
		if v := string(got[0].Value); v >= fmt.Sprint(changes-4) {
			t.Errorf("the held notification %q is not older than the kept ones", v)
		}
	}
	// With the reader back, notifications flow normally.
	if _, err := writer.Set(ctx, "hot", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if n := next(t, lazy); string(n.Value) != "after" || n.Resync {
		t.Fatalf("after catching up: %+v", n)
	}
}
