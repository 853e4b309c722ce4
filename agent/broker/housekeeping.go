package broker

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Housekeeping at deadlines instead of every second.
//
// mochi's event loop (server.go: eventLoop) selects on five *time.Ticker it makes in
// mqtt.New: $SYS every SysTopicResendInterval, and every second the expiry of disconnected
// sessions, of in-flight messages, of retained messages, and the sending of delayed wills.
// None can be turned off through its options: an idle broker would wake five times a
// second, and an idle daemon must not wake (docs/benchmarks.md "Targets"). Our copy of mochi has
// Options.LoopTicks, which New sets: the loop reads channels only the housekeeper sends on
// in place of the tickers. The housekeeper keeps one deadline
// per task, the earliest moment something of that kind can expire, computed with mochi's
// own rules, and one timer for the earliest of them: when it fires, the due tasks'
// channels get a tick, mochi's loop does exactly what its ticker would have made it do,
// and the deadlines are computed again from mochi's state.
//
// Deadlines are lowered by the hooks that announce new things to expire (OnDisconnect of
// a kept session, OnWill with a delay, OnRetainMessage, OnQosPublish, OnSubscribed to
// $SYS) and recomputed from a full scan when they fire and at OnStarted (after sessions
// and retained messages were restored). Anything overdue at a scan (mochi not yet done
// with the tick just sent, or a clock step) is looked at again a second later, mochi's own
// cadence; and every task is scanned at least once per housekeepingSweep, so an expiry no
// hook announced (an inbound QoS 2 exchange left half done) is at most that late.
//
// $SYS values are published every SysTopicResendInterval only while some subscription
// matches a $SYS topic, and once at once when one is made; they are retained, so a
// subscriber still gets the last values when it subscribes.

// housekeepingSweep bounds how long a task goes without a scan.
const housekeepingSweep = time.Hour

// The tasks of mochi's event loop (indexes into mqtt.LoopTicks.C).
const (
	taskSys      = mqtt.LoopSysTopics
	taskClients  = mqtt.LoopClientExpiry
	taskInflight = mqtt.LoopInflightExpiry
	taskRetained = mqtt.LoopRetainedExpiry
	taskWills    = mqtt.LoopWillDelaySend
	numTasks     = mqtt.LoopTasks
)

// housekeeper is the hook that sends mochi's event loop its ticks when something is due.
type housekeeper struct {
	mqtt.HookBase
	srv         *mqtt.Server
	loop        *mqtt.LoopTicks
	sysInterval time.Duration
	log         *slog.Logger

	// inflightDue mirrors due[taskInflight] (unix nanoseconds, 0: none) so that
	// OnQosPublish, once per message sent, usually decides without the lock.
	inflightDue atomic.Int64

	mu      sync.Mutex
	due     [numTasks]time.Time // zero: nothing of that kind can expire
	timer   *time.Timer
	timerAt time.Time // zero: timer stopped
	stopped bool
	ticks   [numTasks]int64 // ticks sent, per task (tests)
}

func newHousekeeper(srv *mqtt.Server, loop *mqtt.LoopTicks, log *slog.Logger) *housekeeper {
	h := &housekeeper{
		srv: srv, loop: loop, log: log,
		sysInterval: time.Duration(srv.Options.SysTopicResendInterval) * time.Second,
	}
	h.timer = time.AfterFunc(time.Hour, h.fire)
	h.timer.Stop()
	return h
}

func (h *housekeeper) ID() string { return "faceagent-housekeeping" }

func (h *housekeeper) Provides(b byte) bool {
	switch b {
	case mqtt.OnStarted, mqtt.OnDisconnect, mqtt.OnWill, mqtt.OnRetainMessage, mqtt.OnQosPublish, mqtt.OnSubscribed:
		return true
	}
	return false
}

// OnStarted scans everything once sessions, in-flight and retained messages are restored.
func (h *housekeeper) OnStarted() {
	now := time.Now()
	var due [numTasks]time.Time
	for task := range numTasks {
		due[task] = h.scan(task, now)
	}
	h.lowerAll(due)
}

// Stop is called by mochi's Close.
func (h *housekeeper) Stop() error {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.timerAt = time.Time{}
	h.mu.Unlock()
	return nil
}

// OnDisconnect: a session kept after its connection expires after its session expiry
// (mochi: clearExpiredClients counts from the client's stop time, set at about this moment).
func (h *housekeeper) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if expire || cl.Net.Inline {
		return
	}
	h.lower(taskClients, time.Now().Add(time.Duration(sessionExpiry(h.srv, cl))*time.Second+time.Second))
}

// OnWill: a will with a delay is sent by the loop once the delay passed (mochi: sendLWT
// queues it with Expiry = now + delay; sendDelayedLWT sends it when now > Expiry).
func (h *housekeeper) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	if d := cl.Properties.Will.WillDelayInterval; d > 0 {
		h.lower(taskWills, time.Now().Add(time.Duration(d)*time.Second+time.Second))
	}
	return will, nil
}

// OnRetainMessage: a stored retained message expires by its own expiry or mochi's maximum.
func (h *housekeeper) OnRetainMessage(_ *mqtt.Client, pk packets.Packet, r int64) {
	if r > 0 && len(pk.Payload) > 0 {
		h.lower(taskRetained, messageDue(pk, h.srv.Options.Capabilities.MaximumMessageExpiryInterval))
	}
}

// OnQosPublish: a message put in flight (sent, or queued for an offline session) expires
// by its own expiry or mochi's maximum.
func (h *housekeeper) OnQosPublish(_ *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	at := messageDue(pk, h.srv.Options.Capabilities.MaximumMessageExpiryInterval)
	if at.IsZero() {
		return
	}
	if cur := h.inflightDue.Load(); cur != 0 && cur <= at.UnixNano() {
		return // the timer already fires earlier
	}
	h.lower(taskInflight, at)
}

// OnSubscribed: a subscription matching $SYS topics gets fresh values at once, then every
// interval. The index is asked rather than the filters read, since mochi also sends $SYS to
// shared and inline subscriptions of "#".
func (h *housekeeper) OnSubscribed(*mqtt.Client, packets.Packet, []byte) {
	h.mu.Lock()
	active := !h.due[taskSys].IsZero()
	h.mu.Unlock()
	if !active && h.sysInterval > 0 && h.sysSubscribed() {
		h.lower(taskSys, time.Now())
	}
}

// lower makes task due at at, unless it already is earlier.
func (h *housekeeper) lower(task int, at time.Time) {
	h.mu.Lock()
	if h.lowerLocked(task, at) {
		h.armLocked()
	}
	h.mu.Unlock()
}

func (h *housekeeper) lowerLocked(task int, at time.Time) bool {
	if at.IsZero() || (!h.due[task].IsZero() && !at.Before(h.due[task])) {
		return false
	}
	h.due[task] = at
	if task == taskInflight {
		h.inflightDue.Store(at.UnixNano())
	}
	return true
}

// armLocked sets the timer to the earliest deadline, or stops it when nothing is due.
func (h *housekeeper) armLocked() {
	if h.stopped {
		return
	}
	var next time.Time
	for _, at := range h.due {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if next.Equal(h.timerAt) {
		return
	}
	h.timerAt = next
	if next.IsZero() {
		h.timer.Stop()
		return
	}
	h.timer.Reset(max(time.Until(next), 0))
}

// fire sends a tick for every task that is due, then computes their next deadlines.
func (h *housekeeper) fire() {
	now := time.Now()
	var fired [numTasks]bool
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.timerAt = time.Time{}
	for task, at := range h.due {
		if !at.IsZero() && !at.After(now) {
			fired[task] = true
			h.due[task] = time.Time{}
			h.ticks[task]++
			if task == taskInflight {
				h.inflightDue.Store(0)
			}
		}
	}
	h.mu.Unlock()
	var next [numTasks]time.Time
	for task, ok := range fired {
		if !ok {
			continue
		}
		select {
		case h.loop.C[task] <- now:
		default: // the loop has not taken the previous tick yet: it will run anyway
		}
		next[task] = h.scan(task, now)
	}
	h.lowerAll(next)
}

// lowerAll brings every task's deadline forward to its entry in due (zero: none) and
// re-arms the timer once.
func (h *housekeeper) lowerAll(due [numTasks]time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for task, at := range due {
		h.lowerLocked(task, at)
	}
	h.armLocked()
}

// scan returns the next moment something of task's kind can expire (zero: nothing can),
// at least a second after now for something already overdue and at most housekeepingSweep
// away while anything exists.
func (h *housekeeper) scan(task int, now time.Time) time.Time {
	maxExpiry := h.srv.Options.Capabilities.MaximumMessageExpiryInterval
	var next time.Time
	consider := func(at time.Time) {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	switch task {
	case taskSys:
		if h.sysInterval > 0 && h.sysSubscribed() {
			consider(now.Add(h.sysInterval))
		}
	case taskClients:
		for _, cl := range h.srv.Clients.GetAll() {
			if stopped := cl.StopTime(); stopped != 0 && !cl.Net.Inline {
				consider(time.Unix(stopped+int64(sessionExpiry(h.srv, cl))+1, 0))
			}
		}
	case taskInflight:
		for _, cl := range h.srv.Clients.GetAll() {
			for _, pk := range cl.State.Inflight.GetAll(false) {
				consider(messageDue(pk, maxExpiry))
			}
		}
	case taskRetained:
		for _, pk := range h.srv.Topics.Retained.GetAll() {
			consider(messageDue(pk, maxExpiry))
		}
	case taskWills:
		for _, pk := range h.loop.WillDelayed.GetAll() {
			consider(time.Unix(pk.Expiry+1, 0))
		}
	}
	if next.IsZero() {
		return next
	}
	if soonest := now.Add(time.Second); next.Before(soonest) {
		return soonest
	}
	if latest := now.Add(housekeepingSweep); next.After(latest) {
		return latest
	}
	return next
}

// messageDue is when mochi's loop removes pk from the retained or in-flight messages
// (clearExpiredRetainedMessages, Client.ClearExpiredInflights): once now > its own expiry
// (MQTT 5), or now - Created > the server's maximum; zero if never.
func messageDue(pk packets.Packet, maxExpiry int64) time.Time {
	var at time.Time
	if pk.ProtocolVersion == 5 && pk.Expiry > 0 {
		at = time.Unix(pk.Expiry+1, 0)
	}
	if maxExpiry > 0 {
		if enforced := time.Unix(pk.Created+maxExpiry+1, 0); at.IsZero() || enforced.Before(at) {
			at = enforced
		}
	}
	return at
}

// sessionExpiry is the number of seconds mochi keeps cl's session after it disconnected
// (clearExpiredClients).
func sessionExpiry(srv *mqtt.Server, cl *mqtt.Client) uint32 {
	if cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryIntervalFlag {
		return cl.Properties.Props.SessionExpiryInterval
	}
	return srv.Options.Capabilities.MaximumSessionExpiryInterval
}

// sysTopics are the topics mochi's publishSysTopics writes.
var sysTopics = []string{
	"version", "time", "uptime", "started", "load/bytes/received", "load/bytes/sent",
	"clients/connected", "clients/disconnected", "clients/maximum", "clients/total",
	"packets/received", "packets/sent", "messages/received", "messages/sent",
	"messages/dropped", "messages/inflight", "retained", "subscriptions",
	"system/memory", "system/threads",
}

// sysSubscribed reports whether any subscription matches one of mochi's $SYS topics.
func (h *housekeeper) sysSubscribed() bool {
	for _, t := range sysTopics {
		s := h.srv.Topics.Subscribers(mqtt.SysPrefix + "/broker/" + t)
		if len(s.Subscriptions) > 0 || len(s.Shared) > 0 || len(s.InlineSubscriptions) > 0 {
			return true
		}
	}
	return false
}

// pending reports the tasks that have a deadline and the ticks sent so far (tests).
func (h *housekeeper) pending() (due [numTasks]time.Time, ticks [numTasks]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.due, h.ticks
}
