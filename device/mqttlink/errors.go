package mqttlink

import (
	"fmt"

	"github.com/seed0e69bba5/faceagent/device"
)

// Error is every error the MQTT link returns or reports: a device.Code, the terminal, the
// topic concerned and the cause. errors.Is matches both the code and the cause.
type Error struct {
	Code     device.Code
	DeviceID string // empty when the error is not about one terminal
	Topic    string // empty when no topic is involved
	Err      error  // the cause; may be nil
}

func (e *Error) Error() string {
	s := "mqttlink"
	if e.DeviceID != "" {
		s += " " + e.DeviceID
	}
	if e.Topic != "" {
		s += " (" + e.Topic + ")"
	}
	if e.Err == nil {
		return fmt.Sprintf("%s: %v", s, e.Code)
	}
	return fmt.Sprintf("%s: %v: %v", s, e.Code, e.Err)
}

// Unwrap returns the code and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Code}
	}
	return []error{e.Code, e.Err}
}
