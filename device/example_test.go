package device_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// Every link's typed error matches the shared codes with errors.Is.
func ExampleCode() {
	err := error(&serial.Error{Code: device.ErrNotConnected, Port: "/dev/ttyS1", DeviceID: "2042253"})
	fmt.Println(errors.Is(err, device.ErrNotConnected), errors.Is(err, device.ErrClosed))
	fmt.Println(err)
	// Output:
	// true false
	// serial /dev/ttyS1 (2042253): not connected
}

func ExampleEvent_String() {
	ev := device.Event{Kind: device.Ack, DeviceID: "2042253", At: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Ack: face.Ack{MessageID: "m-1", Code: 17}}
	fmt.Println(ev)
	fmt.Println(device.Down, device.EventKind(9))
	// Output:
	// 2026-11-22T10:00:00Z 2042253 ack m-1 code=17
	// down EventKind(9)
}
