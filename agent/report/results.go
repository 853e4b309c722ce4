package report

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Outbox is what the reporter needs of the outbox: its results, in order, until they are
// marked reported. The outbox's journal is the results' backlog.
type Outbox interface {
	// Results returns up to n results not yet marked reported, oldest first.
	Results(n int) ([]outbox.Result, error)
	MarkReported(ids ...string) error
	// ResultsReady is poked when results may be waiting.
	ResultsReady() <-chan struct{}
	// Unfinished is how many tasks have no result yet.
	Unfinished() int
}

// State is told of every result reported (the terminals' state in the state store).
type State interface {
	Result(outbox.Result)
}

// Poster POSTs a batch of results' JSON to the back office (intake.http.results_url).
type Poster interface {
	PostResults(ctx context.Context, results [][]byte) error
}

// PosterFunc is a function as a Poster.
type PosterFunc func(ctx context.Context, results [][]byte) error

// PostResults calls p.
func (p PosterFunc) PostResults(ctx context.Context, results [][]byte) error { return p(ctx, results) }

// ResultOptions configure the reporter.
type ResultOptions struct {
	Topic   string // faceagent/{gw}/results
	Poster  Poster // nil: results go only to the broker
	State   State  // nil: none
	Logger  *slog.Logger
	Metrics *ResultMetrics
	// Counts, when set, gives a result its SetWhitelist counts (nil for other results):
	// for a reporter of SetWhitelist results, which the desired whitelists keep.
	Counts func(r *outbox.Result) *wire.WhitelistCounts
}

const reportBatch = 256

// reportGather is how long the reporter lets results gather after the first one while
// other tasks are still unfinished. Every round of the reporter waits for the outbox
// journal to be fsynced up to its last result (Results offers a result only once its
// finish record is durable), and it wakes the publisher, syncs and journals a reported
// record: gathering makes that one round for a burst of results. When nothing is left
// unfinished (the last result of a job) it publishes at once.
const reportGather = 10 * time.Millisecond

// Reporter publishes the outbox's results in order and marks them reported only once the
// upstream broker accepted them (and the Poster, if any, took them), so a result is never
// lost (after a crash it may be sent twice). It is a backlog.Source for the same Drainer
// as the deadletters and forwarded messages: it waits on ResultsReady, no polling while
// nothing finishes.
type Reporter struct {
	ob  Outbox
	o   ResultOptions
	log *slog.Logger
	wg  sync.WaitGroup

	// The publishing goroutine's own: the results of the last Take (cleared after each
	// round, so that they pin no payload).
	results []outbox.Result
	ids     []string
}

// NewReporter returns a reporter of ob's results.
func NewReporter(ob Outbox, o ResultOptions) *Reporter {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{ob: ob, o: o, log: log}
}

// Start publishes through pub until ctx ends; Wait waits for it.
func (r *Reporter) Start(ctx context.Context, pub publish.Publisher) {
	d := &backlog.Drainer{Pub: pub, Source: r, Ready: r.ob.ResultsReady(), Batch: reportBatch,
		Gather: backlog.Gathering{Wait: reportGather, Settled: func() bool { return r.ob.Unfinished() == 0 }},
		Failed: func(err error, retryIn time.Duration) {
			r.log.Warn("reporting results failed; will retry", "in", retryIn, "err", err)
		}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		d.Run(ctx)
	}()
}

// Wait returns once what Start began has ended.
func (r *Reporter) Wait() { r.wg.Wait() }

// Take encodes up to n results from the outbox.
func (r *Reporter) Take(batch []backlog.Message, n int) ([]backlog.Message, bool, error) {
	clear(r.results)
	results, err := r.ob.Results(n)
	if err != nil {
		if !errors.Is(err, outbox.ErrClosed) {
			r.log.Error("reading results", "err", err)
		}
		r.results = r.results[:0]
		return batch, false, nil
	}
	r.results = append(r.results[:0], results...)
	start := len(batch)
	var payloads [][]byte
	payloads = appendResultsJSON(payloads, results, r.o.Counts)
	for i, p := range payloads {
		batch = append(batch, backlog.Message{Topic: r.o.Topic, Payload: p, ID: uint64(start + i)})
	}
	return batch, len(results) == n, nil
}

// Live: a result is always to be sent.
func (r *Reporter) Live(*backlog.Message) bool { return true }

// Accepted posts the accepted results (with a Poster), counts them, tells the state
// writer, and marks them reported.
func (r *Reporter) Accepted(ctx context.Context, done []backlog.Message) (int, error) {
	if r.o.Poster != nil {
		payloads := make([][]byte, len(done))
		for i := range done {
			payloads[i] = done[i].Payload
		}
		if err := r.o.Poster.PostResults(ctx, payloads); err != nil {
			return 0, fmt.Errorf("posting results to the back office: %w", err)
		}
	}
	ids := r.ids[:0]
	for _, res := range r.results[:len(done)] {
		ids = append(ids, res.MessageID)
		if r.o.Metrics != nil {
			r.o.Metrics.Results.With(res.Status.String()).Inc()
		}
		if r.o.State != nil {
			r.o.State.Result(res)
		}
	}
	if err := r.ob.MarkReported(ids...); err != nil && !errors.Is(err, outbox.ErrClosed) {
		r.log.Error("marking results reported", "err", err)
	}
	clear(ids)
	r.ids = ids[:0]
	return len(done), nil
}

// resultJSON is the upstream result of an outbox result, written by appendResultJSON:
// byte for byte what encoding/json writes for wire.Result (FuzzResultJSON checks),
// without its reflection.
func resultJSON(r outbox.Result) []byte {
	out := upstreamResult(r)
	return appendResultJSON(make([]byte, 0, resultJSONSize(&r)), &out)
}

// resultJSONSize is about what appendResultJSON writes for r (more with escapes).
func resultJSONSize(r *outbox.Result) int {
	return 128 + len(r.TaskID) + len(r.DeviceID) + len(r.MessageID) + len(r.Err)
}

// appendResultsJSON appends each result's upstream JSON to payloads, all of them in one
// new buffer (a buffer is never reused: a publisher may hold a payload past the round —
// paho's session until the PUBACK). A result that outgrows the estimate moves on to a
// larger buffer; the payloads before it keep the old one.
func appendResultsJSON(payloads [][]byte, results []outbox.Result, counts func(*outbox.Result) *wire.WhitelistCounts) [][]byte {
	size := 0
	for i := range results {
		size += resultJSONSize(&results[i])
	}
	buf := make([]byte, 0, size)
	for i := range results {
		out := upstreamResult(results[i])
		if counts != nil {
			out.WhitelistCounts = counts(&results[i])
		}
		start := len(buf)
		buf = appendResultJSON(buf, &out)
		payloads = append(payloads, buf[start:len(buf):len(buf)])
	}
	return payloads
}

// appendResultJSON appends r as encoding/json writes it (field order and escaping).
func appendResultJSON(dst []byte, r *wire.Result) []byte {
	dst = append(dst, `{"taskId":`...)
	dst = face.AppendJSONString(dst, r.TaskID)
	dst = append(dst, `,"deviceId":`...)
	dst = face.AppendJSONString(dst, r.DeviceID)
	dst = append(dst, `,"messageId":`...)
	dst = face.AppendJSONString(dst, r.MessageID)
	dst = append(dst, `,"status":`...)
	dst = face.AppendJSONString(dst, string(r.Status))
	dst = append(dst, `,"tries":`...)
	dst = strconv.AppendInt(dst, int64(r.Tries), 10)
	dst = append(dst, `,"error":`...)
	dst = face.AppendJSONString(dst, r.Error)
	dst = append(dst, `,"durationMs":`...)
	dst = strconv.AppendInt(dst, r.DurationMs, 10)
	if c := r.WhitelistCounts; c != nil { // a SetWhitelist's result only
		dst = append(dst, `,"added":`...)
		dst = strconv.AppendInt(dst, int64(c.Added), 10)
		dst = append(dst, `,"deleted":`...)
		dst = strconv.AppendInt(dst, int64(c.Deleted), 10)
		dst = append(dst, `,"unchanged":`...)
		dst = strconv.AppendInt(dst, int64(c.Unchanged), 10)
	}
	return append(dst, '}')
}

// upstreamResult maps an outbox result to its upstream form.
func upstreamResult(r outbox.Result) wire.Result {
	out := wire.Result{
		TaskID: r.TaskID, DeviceID: r.DeviceID, MessageID: r.MessageID,
		Tries: r.Tries, Error: r.Err, DurationMs: r.Duration().Milliseconds(),
	}
	switch r.Status {
	case outbox.Succeeded:
		out.Status = wire.Succeeded
	case outbox.Superseded:
		out.Status = wire.Superseded
	case outbox.Expired:
		out.Status = wire.Failed
		if out.Error == "" {
			out.Error = "expired before it could be sent"
		}
	default:
		out.Status = wire.Failed
	}
	return out
}
