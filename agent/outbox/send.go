package outbox

import (
	"context"
	"fmt"
	"time"
)

// NonBlockingSender is a Sender that can tell which of its sends only queue the command
// and return at once (a publish into an in-process broker). The outbox makes those sends
// on the goroutine whose call decided them (Ack, Heartbeat, EnqueueBatch, the timer, …),
// right after releasing its lock, instead of on a goroutine of their own: an ack is then
// followed by the device's next command with no hand-off to the scheduler, which under
// load costs more than the send itself. Their ctx is the outbox's (cancelled by Close),
// without the ack-timeout bound, since they cannot hang.
type NonBlockingSender interface {
	Sender
	// SendsWithoutBlocking reports whether Send to deviceID never waits for I/O. It is
	// called with the outbox's lock held: it must only look at configuration.
	SendsWithoutBlocking(deviceID string) bool
}

type sendJob struct {
	dev         string
	cmd         Command
	timeout     time.Duration // the ack timeout in force when the command was sent
	nonBlocking bool          // made by the deciding goroutine after unlock (NonBlockingSender)
}

// startSendsLocked hands the collected sends on: blocking ones to goroutines, the others
// to o.inline for unlock to make. Called with o.mu held so that wg.Add cannot race with
// Close's Wait; neither kind takes o.mu before Send returned.
func (o *Outbox) startSendsLocked() {
	if len(o.sends) == 0 {
		return
	}
	if o.closed {
		clear(o.sends)
		o.sends = o.sends[:0]
		return
	}
	for _, s := range o.sends {
		o.wg.Add(1)
		if s.nonBlocking {
			o.inline = append(o.inline, s)
			continue
		}
		go func(s sendJob) {
			defer o.wg.Done()
			// A Send may block forever (a serial write to a wedged terminal): bound it by the
			// ack timeout. Past it the try is lost anyway, and an unbounded Send would let the
			// retry start a second Send for the device while the first still hangs.
			ctx, cancel := context.WithTimeout(o.ctx, s.timeout)
			err := o.send(ctx, s)
			cancel()
			if err != nil {
				o.sendFailed(s.dev, s.cmd.MessageID, s.cmd.Try, err)
				if o.afterSendFailed != nil {
					o.afterSendFailed()
				}
			}
		}(s)
	}
	clear(o.sends)
	o.sends = o.sends[:0]
}

// unlock releases o.mu, then makes the non-blocking sends decided under it. Every method
// that may decide a send unlocks with it.
func (o *Outbox) unlock() {
	// One send (an ack's next command, the common case) is copied out, and o.inline keeps
	// its array for the next holder of o.mu: no allocation per ack. More (an EnqueueBatch
	// that found many idle devices) take the list along; the next holder starts its own.
	var one [1]sendJob
	var jobs []sendJob
	var done []queryDone
	if len(o.queryDone) > 0 {
		done, o.queryDone = o.queryDone, nil
	}
	var oneAcked [1]ackedCommand
	var acked []ackedCommand
	switch len(o.ackedCmds) { // as o.inline: one ack's command (the common case) is copied out
	case 0:
	case 1:
		oneAcked[0], o.ackedCmds[0] = o.ackedCmds[0], ackedCommand{}
		o.ackedCmds = o.ackedCmds[:0]
		acked = oneAcked[:]
	default:
		acked, o.ackedCmds = o.ackedCmds, nil
	}
	switch len(o.inline) {
	case 0:
	case 1:
		one[0], o.inline[0] = o.inline[0], sendJob{}
		o.inline = o.inline[:0]
		jobs = one[:]
	default:
		jobs, o.inline = o.inline, nil
	}
	retired := o.t.spill.takeRetired()
	o.mu.Unlock()
	o.sendInline(jobs)
	if retired != nil {
		retired.Close()
	}
	runQueryDone(done)
	for i := range acked {
		o.acked(acked[i].cmd.DeviceID, acked[i].cmd, acked[i].code)
	}
}

// sendInline makes non-blocking sends on the calling goroutine. A failed one is handled
// at once, and what that decides joins the list: a loop, not a recursion, however many
// commands fail in a row.
func (o *Outbox) sendInline(jobs []sendJob) {
	var done []queryDone // queries a failed send finished
	defer func() { runQueryDone(done) }()
	for len(jobs) > 0 {
		s := jobs[0]
		jobs[0] = sendJob{}
		jobs = jobs[1:]
		err := o.send(o.ctx, s)
		if err != nil {
			o.mu.Lock()
			o.sendFailedLocked(s.dev, s.cmd.MessageID, s.cmd.Try, err)
			jobs = append(jobs, o.inline...)
			o.inline = nil
			done = append(done, o.queryDone...)
			o.queryDone = nil
			o.mu.Unlock()
			if o.afterSendFailed != nil {
				o.afterSendFailed()
			}
		}
		o.wg.Done()
	}
}

// send hands s to the Sender once every record the journal has queued is in its file
// (journal.WriteOut: one write, no fsync): this command's send record and the finish of the
// command the terminal acked before it, which are journalled lazily. A process killed
// after the command left (SIGKILL, a panic, the OOM killer) so keeps both, and after a
// restart the terminal is sent again at most this command, never one it acked before. A
// power cut still loses the last LazyDelay of lazy records: only an fsync protects against
// that. If the write-out fails the command is not sent.
func (o *Outbox) send(ctx context.Context, s sendJob) error {
	if err := o.j.WriteOut(); err != nil {
		return fmt.Errorf("device %s: not sent, journal write-out: %w", s.dev, err)
	}
	return o.sender.Send(ctx, s.dev, s.cmd)
}

func (o *Outbox) sendFailed(deviceID, messageID string, try int, err error) {
	o.mu.Lock()
	defer o.unlock()
	o.sendFailedLocked(deviceID, messageID, try, err)
}

// sendFailedLocked counts a failed Send as a failed try, if the command is still in
// flight with that try.
func (o *Outbox) sendFailedLocked(deviceID, messageID string, try int, err error) {
	if o.closed || o.Err() != nil {
		return
	}
	var d *device
	if q := o.queries[messageID]; q != nil {
		if q.dev.live.query != q || q.tries != try || q.dev.id != deviceID {
			return
		}
		d = q.dev
		o.queryTryFailed(q, "send: "+err.Error(), o.now())
	} else if bd := o.t.devices[deviceID]; bd != nil && bd.batchInFlight(messageID, try) {
		d = bd
		o.inflightTryFailed(d, "send: "+err.Error(), o.now())
	} else {
		it := o.t.items.get(messageID)
		if it == nil && o.faces != nil {
			if d, ok := o.t.devices[deviceID]; ok {
				it = o.faceAlias(d, messageID)
			}
		}
		if it == nil || it.status != InFlight || int(it.tries) != try || it.dev.id != deviceID {
			return
		}
		d = it.dev
		o.tryFailed(it, "send: "+err.Error(), o.now())
	}
	o.pump(d)
	o.touch(d)
	o.rearm()
	o.startSendsLocked()
}
