package statestore

import (
	"math"
	"strconv"
	"testing"
	"time"
)

// TestPXOverflowIsASyntaxError: a PX whose deadline does not fit must not be
// answered +OK while the key vanishes at once (now+PX wrapping negative), and a
// PX beyond a time.Duration must not make the sweeper's timer wrap and fire every
// millisecond. Both are integer overflows: syntax error, nothing stored.
func TestPXOverflowIsASyntaxError(t *testing.T) {
	s, _ := newTestStore(t, nil)
	now := ts(t0, 0, "c")
	for _, px := range []string{
		strconv.FormatInt(math.MaxInt64, 10),
		strconv.FormatInt(maxPX+1, 10),
	} {
		if got := do(s, setReq(now, "k", "v", "PX", px)).reply; got != "-ERR syntax error\r\n" {
			t.Errorf("PX %s: %q", px, got)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("%d keys stored by refused SETs", s.Len())
	}
	longest := strconv.FormatInt(maxPX, 10)
	if got := do(s, setReq(now, "k", "v", "PX", longest)).reply; got != "+OK\r\n" {
		t.Fatalf("PX %s: %q", longest, got)
	}
	if got := do(s, &Request{Payload: cmd("GET", "k")}).reply; got != "$1\r\nv\r\n" {
		t.Fatalf("key with the longest PX: %q", got)
	}
}

func TestUntilDeadlineNeverWraps(t *testing.T) {
	const now = t0
	cases := []struct {
		next int64
		want time.Duration
	}{
		{now + 1500, 1500 * time.Millisecond},
		{now, time.Millisecond},
		{now - 10, time.Millisecond},
		{now + 10_000_000_000_000, time.Duration(maxPX) * time.Millisecond}, // 10^13 ms wrapped before
		{math.MaxInt64, time.Duration(maxPX) * time.Millisecond},
		{math.MinInt64, time.Millisecond},
	}
	for _, c := range cases {
		if got := untilDeadline(c.next, now); got != c.want {
			t.Errorf("untilDeadline(%d) = %v, want %v", c.next, got, c.want)
		}
	}
}
