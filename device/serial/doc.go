// Package serial is a device.Link to one face terminal on a serial line (a Linux tty set up
// through termios, read and written through the runtime's poller), carrying protocol v1 messages (device/face, msgp-encoded) in checksummed frames.
//
// # Framing
//
//	off  size  field
//	0    2     SOF 0xFA 0xCE
//	2    1     kind: 0x11 command, 0x12 ack, 0x13 heartbeat (version 1 in the high nibble)
//	3    2     payload length n, big endian, at most MaxPayload (default 4608)
//	5    1     header check: low byte of CRC-32C over bytes 2..4
//	6    n     payload: one msgp-encoded face.Command, face.Ack or face.Heartbeat
//	6+n  4     CRC-32C over bytes 2..6+n-1, big endian
//
// Why this shape: the two-byte SOF gives the decoder something to scan for; the header check
// rejects a false SOF inside garbage or payload before its length is believed (so a bogus
// length cannot make the decoder wait for kilobytes that never come); the length bound caps
// memory; CRC-32C (hardware-assisted on amd64 and arm64) catches corrupted payloads, every
// single-bit error among them. Overhead is 10 bytes a frame.
//
// Resynchronisation: bytes before a SOF are skipped (reported as an Error event with the
// count). A rejected candidate (bad header, over the bound, bad CRC) is abandoned by one
// byte only and the scan resumes right after its SOF, so a frame cut short by the next one
// is found again: the cut frame's length spans the next frame, its CRC fails, and the scan
// lands on the next frame's SOF. A partial frame that receives no byte for FrameTimeout is
// dropped the same way (ErrCutFrame): a terminal that died mid-frame does not stall the line.
//
// # Tutorial
//
//	link, err := serial.New(serial.Config{Port: "/dev/ttyS1", DeviceID: "2042253", Baud: 115200})
//	if err != nil { ... }            // *serial.Error with device.ErrConfig
//	defer link.Close()
//	// wait for a device.Up event, then
//	err = link.Send(ctx, "2042253", cmd) // device.ErrNotConnected while the port is missing
//
// Tests and the simulator use a pseudo-terminal: OpenPTY gives a Path to hand to Config.Port
// and the Master end that plays the terminal.
//
// # Caveats
//
//   - One port, one terminal: Send to any other device id is device.ErrUnknownDevice. A
//     heartbeat naming another device is reported as an Error event, not delivered.
//   - The port is reopened with exponential backoff (ReopenMin..ReopenMax) after it fails or
//     disappears; one Down event per outage, one Up per successful open. Bytes in flight when
//     the port vanished are lost: the agent's retry covers them.
//   - The port is opened exclusively (TIOCEXCL), raw, without flow control; rates without a
//     Bnnn constant go through termios2 (BOTHER); 1.5 stop bits do not exist on Linux, so a
//     port configured with them never opens (Down events say why). The line setup is the one
//     go.bug.st/serial makes (the tests compare them); the daemon does not use that module,
//     whose package-level regexp alone kept the regexp package in the binary.
//   - Reads are bounded by ReadTimeout (a read returns (0, nil) on timeout, which the
//     reader treats as a tick, not as end of data). Close wakes a blocked read at once.
//   - Port writes block without a timeout. On a real UART they drain at the baud
//     rate; on a line nobody reads (a pty, a wedged adapter) they may not. Send therefore
//     returns when its ctx ends, even mid-write (the write goes on in the background and
//     holds the write lock until it ends), and Close waits WriteGrace for such a write before
//     it closes the port anyway. Give Send a deadline.
//   - A pty does not enforce the baud rate; a real UART does. See docs/benchmarks.md.
//   - Serial ports and OpenPTY are Linux only.
package serial
