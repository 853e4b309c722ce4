package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A frame written at once and read in pieces takes exactly its bytes' time on the line,
// however late each piece's sleep wakes up: the overshoot is the process's, not the line's.
// Booking each late piece afresh from its wake-up added about 0.7 ms a piece, and made a
// 1,166-byte PutFace frame take 14 ms longer than the line needs.
func TestPacerFollowingPiecesIgnoreOvershoot(t *testing.T) {
	const baud, frame = 115200, 11520 // one second of line
	p := pacer{baud: baud}
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(1000, 0)
	now := t0
	var done time.Time
	for sent := 0; sent < frame; sent += paceChunk {
		done = now.Add(p.take(now, min(paceChunk, frame-sent), sent > 0))
		now = done.Add(time.Duration(rng.IntN(1000)) * time.Microsecond) // the sleep overshoots
	}
	if got := done.Sub(t0); got != time.Second {
		t.Fatalf("%d bytes crossed the line in %v, want exactly 1s", frame, got)
	}
}

// A pause on the line is time the line was idle: bytes that do not follow (a new write), or
// that follow more than a piece's time late, start a new busy period when they come.
func TestPacerPausesStartAfresh(t *testing.T) {
	const baud = 115200
	piece := time.Duration(paceChunk) * 10 * time.Second / baud
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		late   time.Duration
		follow bool
		want   time.Duration // after t0 until the second piece has crossed
	}{
		{"following, on time", 0, true, 2 * piece},
		{"following, a little late", piece / 2, true, 2 * piece},
		{"following, over a piece late", 2 * piece, true, 4 * piece},
		{"a new write, a little late", piece / 2, false, piece/2 + 2*piece},
		{"a new write while the line is busy", -piece / 2, false, 2 * piece},
	} {
		p := pacer{baud: baud}
		first := p.take(t0, paceChunk, false)
		at := t0.Add(first + c.late)
		got := at.Add(p.take(at, paceChunk, c.follow)).Sub(t0)
		if d := got - c.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: second piece crossed at %v, want %v", c.name, got, c.want)
		}
	}
}
