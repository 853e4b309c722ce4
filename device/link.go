package device

import (
	"context"
	"fmt"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Link carries protocol v1 between the agent and the terminals reachable through one
// transport. Implementations are safe for concurrent use.
type Link interface {
	// Send hands cmd for terminal deviceID to the transport. It validates cmd first
	// (face.Command.Validate). A nil error means the transport accepted it, not that the
	// terminal received it: the ack arrives as an Event.
	Send(ctx context.Context, deviceID string, cmd face.Command) error
	// Events delivers acks, heartbeats, connection changes and errors in arrival order.
	// The channel is closed after Close returns.
	Events() <-chan Event
	// Close stops the link, wakes any blocked I/O and waits for its goroutines. It is
	// idempotent.
	Close() error
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	Ack       EventKind = iota + 1 // a terminal answered a command: Event.Ack
	Heartbeat                      // a terminal is alive: Event.Heartbeat
	Up                             // the transport to the terminal(s) is usable
	Down                           // the transport is gone; Event.Err says why when known
	Error                          // something arrived that could not be used: Event.Err
)

// String names the kind for logs.
func (k EventKind) String() string {
	switch k {
	case Ack:
		return "ack"
	case Heartbeat:
		return "heartbeat"
	case Up:
		return "up"
	case Down:
		return "down"
	case Error:
		return "error"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one thing a Link observed.
type Event struct {
	Kind EventKind
	// DeviceID is the terminal concerned. Empty for Up/Down of a connection shared by
	// several terminals, and for an Error that cannot be attributed to one terminal.
	DeviceID  string
	At        time.Time // when the link received it (local clock)
	Ack       face.Ack
	Heartbeat face.Heartbeat
	Err       error // Error events; Down events when the cause is known
}

// String renders the event for logs and test failures.
func (e Event) String() string {
	switch e.Kind {
	case Ack:
		return fmt.Sprintf("%s %s ack %s code=%d", e.At.Format(time.RFC3339Nano), e.DeviceID, e.Ack.MessageID, e.Ack.Code)
	case Heartbeat:
		return fmt.Sprintf("%s %s heartbeat persons=%d", e.At.Format(time.RFC3339Nano), e.DeviceID, e.Heartbeat.Persons)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s %s %s: %v", e.At.Format(time.RFC3339Nano), e.DeviceID, e.Kind, e.Err)
	}
	return fmt.Sprintf("%s %s %s", e.At.Format(time.RFC3339Nano), e.DeviceID, e.Kind)
}
