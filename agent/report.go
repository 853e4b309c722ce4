package agent

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// publisher is what carries reports upstream.
type publisher = publish.Publisher

// inlinePublisher publishes through the embedded broker's inline client: the message is
// routed (and, for persistent sessions, stored by the broker's storage hook) before
// Publish returns.
//
// It waits until the broker serves: mochi loads the stored sessions and their
// subscriptions only then, and a message published before is routed to nobody. The
// reporter starts before the broker listens (so no task is taken before the outbox is
// open) and publishes the results left unreported by a crash at once; without the wait
// they were dropped and marked reported, and a persistent back office never saw them.
//
// A message the broker could not queue for one subscriber is that subscriber's matter, not
// the publisher's: the broker holds a QoS 1 message in the subscriber's session while its
// write queue is full, and drops it for that subscriber alone only once its session is
// full (max_session_bytes, counted in faceagent_broker_dropped_total). Publishing it again
// to everyone would stall every other subscriber behind the slowest one.
type inlinePublisher struct {
	srv     *broker.Broker
	serving <-chan struct{} // closed once the broker has started
	// br, when set, publishes with PublishDeferred: SyncSince must then be called before a
	// published message counts as stored.
	br *broker.Broker
}

// Mark returns the point from which SyncSince checks what is published.
func (p inlinePublisher) Mark() uint64 {
	if p.br == nil {
		return 0
	}
	return uint64(p.br.SessionsMark())
}

// SyncSince returns once what was published is stored by the embedded broker, with an
// error if any of what was published since mark (Mark's return) is not: a commit of the
// broker's sessions journal that failed, even if a later one succeeded (a full disk,
// freed again), must not let the batch count as stored.
func (p inlinePublisher) SyncSince(mark uint64) error {
	if p.br == nil {
		return nil
	}
	return p.br.SyncSessionsSince(broker.SessionsMark(mark))
}

func (p inlinePublisher) publish(topic string, payload []byte) error {
	if p.br != nil {
		return p.br.PublishDeferred(topic, payload, 1)
	}
	return p.srv.Publish(topic, payload, 1)
}

func (p inlinePublisher) Publish(ctx context.Context, topic string, payload []byte) error {
	select {
	case <-p.serving:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.publish(topic, payload)
}

// topics are the upstream topics of one gateway (docs/design.md "Topics").
type topics struct{ tasks, results, deadletter, devices string }

func upstreamTopics(gw string) topics {
	p := "faceagent/" + gw + "/"
	return topics{tasks: p + "tasks", results: p + "results", deadletter: p + "deadletter", devices: p + "devices/"}
}

// resultJSON is the upstream result of an outbox result, written by appendResultJSON:
// byte for byte what encoding/json writes for wire.Result (FuzzResultJSON checks),
// without its reflection. The reporter encodes one per finished task (appendResultsJSON).
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
func appendResultsJSON(payloads [][]byte, results []outbox.Result) [][]byte {
	size := 0
	for i := range results {
		size += resultJSONSize(&results[i])
	}
	buf := make([]byte, 0, size)
	for i := range results {
		out := upstreamResult(results[i])
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

// reporter publishes the outbox's results in order and marks them reported only once the
// upstream broker accepted them, so a result is never lost (after a crash it may be sent
// twice). It waits on ResultsReady: no polling while nothing finishes.
type reporter struct {
	ob     *outbox.Outbox
	pub    publisher
	topic  string
	log    *slog.Logger
	m      *agentMetrics
	state  *devstate.Writer
	poster *resultPoster // nil without intake.http.results_url
	wg     sync.WaitGroup

	// The publisher goroutine's own, used again every round (cleared after it, so that
	// they pin no payload).
	payloads [][]byte
	ids      []string
}

const reportBatch = 256

// reportGather is how long the reporter lets results gather after the first one while
// other tasks are still unfinished. Every round of the reporter waits for the outbox
// journal to be fsynced up to its last result (Results offers a result only once its
// finish record is durable), and it wakes the publisher, syncs and journals a reported
// record: at 64 terminals acking after 20 ms it ran ~280 rounds a second of ~9 results,
// now ~60 of ~45 (fsyncs took about a twentieth of that benchmark's CPU). When nothing is
// left unfinished (the last result of a job) it publishes at once.
const reportGather = 10 * time.Millisecond

func (r *reporter) start(ctx context.Context) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		g := gathering{wait: reportGather, settled: func() bool { return r.ob.Unfinished() == 0 }}
		// drain logs its own failures: they differ by stage (publish, sync, post).
		publishBacklogGathered(ctx, r.ob.ResultsReady(), g, r.drain, func(error, time.Duration) {})
	}()
}

// drain publishes one batch; more is true when there may be more, sent how many were
// marked reported, err non-nil when the batch is to be tried again. With an HTTP
// results_url the batch is also POSTed, and marked reported only once both took it.
func (r *reporter) drain(ctx context.Context) (more bool, sent int, err error) {
	batch := publish.BatchFor(r.pub, reportBatch)
	results, err := r.ob.Results(batch)
	if err != nil {
		if !errors.Is(err, outbox.ErrClosed) {
			r.log.Error("reading results", "err", err)
		}
		return false, 0, nil
	}
	all := appendResultsJSON(r.payloads[:0], results)
	defer func() { clear(all); r.payloads = all[:0] }()
	payloads := all
	// In order, up to the publisher's window in flight; n is the prefix accepted. Stop at
	// the first failure so results stay in order.
	mark := publish.MarkOf(r.pub)
	n, err := publish.InOrder(ctx, r.pub, len(results), func(i int) (string, []byte, bool) {
		return r.topic, payloads[i], false
	})
	if err != nil {
		r.log.Warn("publishing a result failed; will retry", "task", results[n].TaskID, "err", err)
	}
	payloads = payloads[:n]
	done := results[:len(payloads)]
	if len(done) > 0 {
		if serr := publish.SyncSince(r.pub, mark); serr != nil {
			r.log.Warn("storing results in the broker's sessions failed; will retry", "err", serr)
			done, err = nil, serr
		}
	}
	if r.poster != nil && len(done) > 0 {
		if perr := r.poster.post(ctx, payloads); perr != nil {
			r.log.Warn("posting results to the back office failed; will retry", "err", perr)
			done, err = nil, perr
		}
	}
	ids := r.ids[:0]
	for _, res := range done {
		ids = append(ids, res.MessageID)
		r.m.result(res)
		r.state.Result(res)
	}
	if merr := r.ob.MarkReported(ids...); merr != nil && !errors.Is(merr, outbox.ErrClosed) {
		r.log.Error("marking results reported", "err", merr)
	}
	clear(ids)
	r.ids = ids[:0]
	if err != nil {
		return true, len(done), err
	}
	return len(results) == batch, len(done), nil
}
