package serial_test

import (
	"fmt"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// A frame cut short by the next one: the cut frame is rejected by its checksum and the
// decoder resynchronises on the next SOF.
func ExampleReadFrame() {
	a, _ := serial.AppendMessage(nil, serial.KindAck, &face.Ack{MessageID: "m-1"})
	b, _ := serial.AppendMessage(nil, serial.KindAck, &face.Ack{MessageID: "m-2"})
	line := append([]byte("noise"), a[:len(a)/2]...)
	line = append(line, b...)
	for len(line) > 0 {
		f, rest, err := serial.ReadFrame(line, 0)
		line = rest
		if err == serial.ErrIncomplete {
			break
		}
		if err != nil {
			fmt.Println("rejected:", err)
			continue
		}
		m, _ := f.Decode()
		fmt.Println("ack", m.(face.Ack).MessageID)
	}
	// Output:
	// rejected: serial: frame checksum mismatch
	// ack m-2
}
