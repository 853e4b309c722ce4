package serial

import (
	"fmt"

	"github.com/seed0e69bba5/faceagent/device"
)

// Error is every error the serial link returns or reports: a device.Code, the port, the
// terminal and the cause. errors.Is(err, device.ErrNotConnected) and errors.Is(err, cause)
// both work.
type Error struct {
	Code     device.Code
	Port     string
	DeviceID string
	Err      error // the cause; may be nil
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("serial %s (%s): %v", e.Port, e.DeviceID, e.Code)
	}
	return fmt.Sprintf("serial %s (%s): %v: %v", e.Port, e.DeviceID, e.Code, e.Err)
}

// Unwrap returns the code and the cause, so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Code}
	}
	return []error{e.Code, e.Err}
}
