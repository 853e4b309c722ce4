package device

// Code classifies a link error. A Code is itself an error, so callers test a link's typed
// error with errors.Is(err, device.ErrNotConnected) whatever the link.
type Code uint8

// Every code a link reports.
const (
	// ErrClosed is returned by Send after Close.
	ErrClosed Code = iota + 1
	// ErrUnknownDevice is returned when a link does not carry the named terminal (a serial
	// link carries exactly one; an MQTT link may be restricted to a list).
	ErrUnknownDevice
	// ErrNotConnected is returned by Send while the transport is down (broker unreachable,
	// serial port missing). The command was not sent; try again after an Up event.
	ErrNotConnected
	// ErrInvalid is returned by Send for a command that fails validation, and carried by
	// Error events for a received message that is not valid protocol v1 (bad JSON or msgp,
	// missing messageId, unknown op, …).
	ErrInvalid
	// ErrTransport is a failure of the transport itself: a publish refused by the broker, a
	// write or read error on the port. Down events carry it too.
	ErrTransport
	// ErrFrame is a serial frame rejected by the framing layer (bad checksum, over the size
	// bound, cut short); the link resynchronised on the next frame.
	ErrFrame
	// ErrConfig is returned by a link constructor for an unusable configuration.
	ErrConfig
)

// Error returns the code's description.
func (c Code) Error() string {
	switch c {
	case ErrClosed:
		return "link closed"
	case ErrUnknownDevice:
		return "unknown device"
	case ErrNotConnected:
		return "not connected"
	case ErrInvalid:
		return "invalid message"
	case ErrTransport:
		return "transport error"
	case ErrFrame:
		return "bad frame"
	case ErrConfig:
		return "bad configuration"
	}
	return "device error"
}
