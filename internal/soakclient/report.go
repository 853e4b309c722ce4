package soakclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is what a Run did, counted per request.
type Report struct {
	Requests   int // asked for
	Issued     int // sent (or queued for the reconnect)
	Answered   int // issued and answered at least once
	Unanswered int // issued and never answered
	AckedLost  int // of those, acknowledged by the broker (PUBACK): the broker lost the answer
	// LostInCrash: of those, the ones unanswered when a connection dropped and not covered
	// by a Barrier: answers a crash lost (the broker acknowledges a request only once its
	// answer is stored for the session, so there must be none).
	LostInCrash int
	TimedOut    int // given up after Timeout (or refused); a later answer still counts in Answered
	Stalled     bool

	Repeats  int // answers beyond the first that MQTT allows (see the package doc)
	Phantoms int // answers beyond that: kept by the broker although acknowledged
	Unknown  int // answers with correlation data no request had

	Drops, Resumes int // connections lost; sessions resumed
	Resent         int // requests written again after a reconnect
	AcrossDrop     int // answered requests in flight when a connection dropped (not in the latencies)

	Elapsed       time.Duration
	Active        time.Duration // from the start to the last first answer (a stall's onset)
	P50, P99, Max time.Duration

	Problems     int    // everything above that went wrong, and bad answers
	FirstProblem string // the first problems, one a line
}

// Err is nil when every request was answered, nothing came that should not have, and
// every answer was right; otherwise it says what went wrong.
func (r *Report) Err() error {
	if r.Issued == r.Requests && r.Unanswered == 0 && r.Phantoms == 0 && r.Unknown == 0 && r.Problems == 0 && !r.Stalled {
		return nil
	}
	return fmt.Errorf("%s\nfirst problems:\n%s", r, r.FirstProblem)
}

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests %d: issued %d, answered %d, unanswered %d (%d acknowledged by the broker, %d of them in a crash's window), timed out %d; "+
		"repeats %d, phantoms %d, unknown %d; drops %d, resumes %d, resent %d, across a drop %d; %.1fs, %.0f/s, p50 %v, p99 %v, max %v; problems %d",
		r.Requests, r.Issued, r.Answered, r.Unanswered, r.AckedLost, r.LostInCrash, r.TimedOut, r.Repeats, r.Phantoms, r.Unknown,
		r.Drops, r.Resumes, r.Resent, r.AcrossDrop, r.Elapsed.Seconds(), float64(r.Answered)/max(r.Elapsed.Seconds(), 1e-9),
		r.P50, r.P99, r.Max, r.Problems)
	if r.Stalled {
		fmt.Fprintf(&b, "; STALLED after %d answers in %.1fs (%.0f/s)", r.Answered, r.Active.Seconds(), float64(r.Answered)/max(r.Active.Seconds(), 1e-9))
	}
	return b.String()
}

// Report counts what the client has seen so far (complete once Run has returned).
func (c *Client) Report() *Report {
	p50, p99, mx := c.percentiles()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &Report{Drops: len(c.drops), Resumes: c.resumes, Unknown: c.unknown, P50: p50, P99: p99, Max: mx,
		Problems: c.nProblems, FirstProblem: strings.Join(c.problems, "\n")}
	if c.run == nil {
		return r
	}
	r.Requests, r.Issued, r.Stalled, r.Elapsed = int(c.run.total), int(c.run.next), c.run.stalled, c.run.elapsed
	if !c.lastAnswer.IsZero() {
		r.Active = c.lastAnswer.Sub(c.run.start)
	}
	if r.Elapsed == 0 {
		r.Elapsed = time.Since(c.run.start)
	}
	for i := range r.Issued {
		rc := &c.recs[i]
		if rc.answers == 0 {
			r.Unanswered++
			if rc.pubacked {
				r.AckedLost++
			}
			if rc.mayBeLost {
				r.LostInCrash++
			}
		} else {
			r.Answered++
			allowed := 1 + int(rc.resends) + int(rc.graceLeft)
			r.Repeats += min(int(rc.answers), allowed) - 1
			r.Phantoms += max(0, int(rc.answers)-allowed)
		}
		if rc.timedOut {
			r.TimedOut++
		}
		if rc.latency < 0 {
			r.AcrossDrop++
		}
		r.Resent += int(rc.resends)
	}
	if r.Stalled {
		r.Problems++
	}
	return r
}

// percentiles of the latencies of the requests answered so far, first write to first
// answer, leaving out those in flight when a connection dropped.
func (c *Client) percentiles() (p50, p99, mx time.Duration) {
	c.mu.Lock()
	lat := make([]int64, 0, c.answered)
	for i := range c.recs {
		if l := c.recs[i].latency; l > 0 {
			lat = append(lat, l)
		}
	}
	c.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	at := func(q int) time.Duration { return time.Duration(lat[min(len(lat)-1, len(lat)*q/100)]) }
	return at(50), at(99), time.Duration(lat[len(lat)-1])
}

// Answered is the number of requests answered so far.
func (c *Client) Answered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

// WaitAnswered returns once n requests are answered, or with an error when ctx ends or the
// client ends first.
func (c *Client) WaitAnswered(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, progress := c.answered, c.progress
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-progress:
		case <-c.down:
			return errors.New("soakclient: the client ended")
		case <-ctx.Done():
			return fmt.Errorf("soakclient: %d of %d answered: %w", got, n, ctx.Err())
		}
	}
}
