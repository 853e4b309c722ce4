package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Status is where a command is in its life.
type Status uint8

// The statuses. Their numbers are written to the journal: never renumber.
const (
	Scheduled  Status = 0 // waiting to be sent (maybe after a backoff, or for its device)
	InFlight   Status = 1 // sent, waiting for the device's ack
	Succeeded  Status = 2 // acked with code 0
	Failed     Status = 3 // refused by the device, or no ack after MaxTries
	Superseded Status = 4 // a later command for the same person on the same device replaced it before it was sent
	Expired    Status = 5 // its Task.ExpiresAt passed before it could be sent
)

var statusNames = [...]string{"scheduled", "in-flight", "succeeded", "failed", "superseded", "expired"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether s is final.
func (s Status) Terminal() bool { return s >= Succeeded }

// Task is one command to deliver, as accepted at intake.
type Task struct {
	MessageID string // unique; the device acks it; the dedupe key
	TaskID    string // the back office's id, echoed in the result
	DeviceID  string
	Op        string // e.g. "AddPerson", "DeletePerson"; opaque to the outbox
	PersonID  string // the coalescing key: a later task for the same person supersedes an unsent one
	Payload   []byte // what the Sender needs to build the device's command; opaque, stored as is
	ExpiresAt time.Time
	// NoResult delivers the command like any other but reports no result: Results never
	// returns it, and it leaves the table as soon as it finishes (its id stays in the
	// dedupe memory). For commands the back office never sent — a whitelist sync's
	// corrective AddPerson and DeletePerson, reported by the sync itself. Journalled with
	// the task: it holds across restarts. Such a command never supersedes an unsent one
	// that reports a result (see Coalescing in the package doc), and until it is sent
	// every task with a result goes before it.
	NoResult bool
}

// Command is what the outbox asks the Sender to deliver. A batch (Op "AddPersons") has
// no TaskID nor PersonID; its Payload is the whole face.Command, and Try counts its sends.
type Command struct {
	MessageID string
	TaskID    string
	DeviceID  string
	Op        string
	PersonID  string
	Payload   []byte // shared with the outbox (kept for retries): do not modify
	Try       int    // 1 for the first send; a resend keeps the MessageID
}

// Sender delivers a command to a device. The outbox calls Send from a goroutine of its own
// per send, at most one command per device at a time, never while holding a lock; a
// NonBlockingSender's non-blocking sends are made on the calling goroutine instead. A nil
// error means "handed to the transport"; the outcome arrives later through Ack. An error
// counts as a failed try. ctx expires after the ack timeout (the device's RetryInterval,
// real time) and is cancelled by Close: Send must return when it is done (a Send that does
// not may still run when the retry calls Send again for the same device).
type Sender interface {
	Send(ctx context.Context, deviceID string, cmd Command) error
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, deviceID string, cmd Command) error

// Send implements Sender.
func (f SenderFunc) Send(ctx context.Context, deviceID string, cmd Command) error {
	return f(ctx, deviceID, cmd)
}

// Result is the outcome of a finished command, to be reported upstream.
type Result struct {
	MessageID  string
	TaskID     string
	DeviceID   string
	Status     Status // Succeeded, Failed, Superseded or Expired
	Tries      int
	Err        string
	AddedAt    time.Time
	FinishedAt time.Time
}

// Duration is the time from intake to the outcome.
func (r Result) Duration() time.Duration { return r.FinishedAt.Sub(r.AddedAt) }

// Settings are the dispatch settings ([dispatch] in the config); SetSettings changes them
// live. A zero field means its default.
type Settings struct {
	RetryInterval    time.Duration // ack timeout, and the backoff base. Default 2s.
	MaxTries         int           // sends before a command is Failed. Default 5; at most 65535.
	HeartbeatTimeout time.Duration // silence after which a device is offline. Default 30s.
	MaxBackoff       time.Duration // cap of the exponential backoff. Default 1m.
	FailedRetention  time.Duration // how long after failing a reported failure is kept (for RetryFailed). Default 168h.
	BreakerThreshold int           // consecutive unacked tries that open a device's breaker. Default 5.
	BreakerCooldown  time.Duration // first open period; doubles per trip up to 16x. Default 30s.
	// MaxBatch bounds the persons gathered into one AddPersons, whatever a terminal's
	// heartbeat announces (batch.go). Default 1: no batches. At most face.MaxBatch.
	MaxBatch int
}

func (s Settings) withDefaults() Settings {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&s.RetryInterval, 2*time.Second)
	def(&s.HeartbeatTimeout, 30*time.Second)
	def(&s.MaxBackoff, time.Minute)
	def(&s.FailedRetention, 7*24*time.Hour)
	def(&s.BreakerCooldown, 30*time.Second)
	if s.MaxTries <= 0 {
		s.MaxTries = 5
	}
	s.MaxTries = min(s.MaxTries, maxTries) // tries are counted in 16 bits
	if s.BreakerThreshold <= 0 {
		s.BreakerThreshold = 5
	}
	s.MaxBatch = min(max(s.MaxBatch, 1), face.MaxBatch)
	return s
}

// DeviceConfig is per-device configuration. The dispatch overrides (RetryInterval,
// MaxTries, HeartbeatTimeout) take the outbox's Settings value when zero, also after a
// later SetSettings.
type DeviceConfig struct {
	// NoHeartbeat is for firmware that sends no heartbeats (config `heartbeat = false`): the
	// device counts as online unless its link is down.
	NoHeartbeat bool
	// RetryInterval overrides Settings.RetryInterval (ack timeout and backoff base) for
	// this device.
	RetryInterval time.Duration
	// MaxTries overrides Settings.MaxTries for this device.
	MaxTries int
	// HeartbeatTimeout overrides Settings.HeartbeatTimeout for this device.
	HeartbeatTimeout time.Duration
	// FaceChunk is the size of the face chunks sent to this device (Options.Faces); 0:
	// Options.FaceChunk. A serial terminal's chunk must fit its frame (face.ChunkLimitFor).
	FaceChunk int
	// MaxCommandBytes bounds one command to this device in msgp (a serial frame's
	// payload): an AddPersons batch takes no more persons than fit. 0: no bound (MQTT).
	MaxCommandBytes int
}

// over returns s with c's overrides applied: the settings in force for the device.
func (c DeviceConfig) over(s Settings) Settings {
	if c.RetryInterval > 0 {
		s.RetryInterval = c.RetryInterval
	}
	if c.MaxTries > 0 {
		s.MaxTries = min(c.MaxTries, maxTries)
	}
	if c.HeartbeatTimeout > 0 {
		s.HeartbeatTimeout = c.HeartbeatTimeout
	}
	return s
}

// DeviceStatus is a device's dispatch state, for metrics, the control keys and the tools.
type DeviceStatus struct {
	DeviceID      string
	Online        bool
	Paused        bool
	Queued        int    // waiting, not counting the one in flight
	InFlight      string // message id, "" when none (of a batch in flight: its first task's)
	InFlightTries int
	// InFlightTasks is how many tasks the command in flight carries: 0, 1, or an
	// AddPersons batch's.
	InFlightTasks int
	LastAck       time.Time
	LastSeen      time.Time
	// OnlineUntil is when an online device goes offline unless it is heard from again
	// (its last heartbeat or ack plus its heartbeat timeout); zero when it is offline or
	// needs no heartbeats. Nothing announces that moment: a watcher arms a timer for it.
	OnlineUntil      time.Time
	BreakerOpenUntil time.Time // zero when closed
	FailedHeld       int       // failed commands kept for RetryFailed
	// Queries waiting or in flight (Query): not in Queued nor InFlight, which are the
	// tasks' commands, nor in the counters below.
	Queries int
	// NoResult is how many of Queued and InFlightTasks are commands without a result
	// (Task.NoResult: a whitelist sync's corrections); the back office's tasks pending are
	// Queued plus InFlightTasks less NoResult.
	NoResult int
	// Counters since Open.
	Sent, Succeeded, Failed, Superseded, Expired, Retries uint64
}

// Stats are table-wide figures.
type Stats struct {
	Queued     int // unfinished (scheduled and in flight)
	InFlight   int
	Unreported int // results not yet marked reported
	FailedHeld int
	Devices    int
	// The payload file (payloads.cache beside the journal; see the package Caveats).
	PayloadsOnHeap     int    // payloads kept in memory: the file could not take them (or there is none)
	PayloadFileBytes   int64  // the file's size: live and dead payloads, and the 4-byte checksum of each
	PayloadWriteErrors uint64 // failed writes since Open (their payloads stayed in memory)
	PayloadReadErrors  uint64 // failed reads since Open (a command stayed queued, a snapshot was not written)
	// Payloads whose record in the file failed its check (or could not be read), read
	// again from the journal since Open, and those the journal could not give back (its
	// record damaged too, or the journal unreadable): the command waits.
	PayloadRepairs        uint64
	PayloadRepairFailures uint64
}
