package agent

import (
	"errors"
	"sync"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// setResults is the source of SetWhitelist results for a report.Reporter on the results
// topic: the desired whitelists keep those tasks (with the list change they made) and
// their results until reported, as the outbox keeps the other tasks'.
type setResults struct {
	s *whitelist.Store

	mu     sync.Mutex
	counts map[string]wire.WhitelistCounts // of the results last returned
}

var _ report.Outbox = (*setResults)(nil)

func (r *setResults) Results(n int) ([]outbox.Result, error) {
	tasks := r.s.SetResults(n)
	out := make([]outbox.Result, len(tasks))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = make(map[string]wire.WhitelistCounts, len(tasks))
	for i, t := range tasks {
		st := outbox.Failed
		switch t.Status {
		case whitelist.SetSucceeded:
			st = outbox.Succeeded
		case whitelist.SetSuperseded:
			st = outbox.Superseded
		}
		out[i] = outbox.Result{MessageID: t.MessageID, TaskID: t.TaskID, DeviceID: t.DeviceID, Status: st,
			Tries: t.Tries, Err: t.Err, AddedAt: t.Added, FinishedAt: t.Finished}
		r.counts[t.MessageID] = wire.WhitelistCounts{Added: t.Counts.Added, Deleted: t.Counts.Deleted, Unchanged: t.Counts.Unchanged}
	}
	return out, nil
}

// Counts is report.ResultOptions.Counts: every result of this source has them.
func (r *setResults) Counts(res *outbox.Result) *wire.WhitelistCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[res.MessageID]
	return &c
}

func (r *setResults) MarkReported(ids ...string) error {
	err := r.s.MarkSetReported(ids...)
	if errors.Is(err, whitelist.ErrClosed) {
		return outbox.ErrClosed
	}
	return err
}

func (r *setResults) ResultsReady() <-chan struct{} { return r.s.SetResultsReady() }

func (r *setResults) Unfinished() int { return r.s.SetsUnfinished() }
