// Package device is the boundary between the agent and the face terminals: one Link per
// transport (local MQTT, a serial line), each carrying protocol v1 messages (package
// device/face) to and from any number of terminals.
//
// A Link sends commands and reports everything that comes back as an Event on one channel:
// acks, heartbeats, connection changes and errors (a malformed message is an Error event
// naming the problem, never a panic and never a silent drop). Every Event carries the device
// id it concerns and the time it was received.
//
// # Tutorial
//
//	link, err := mqttlink.New(mqttlink.Config{Bus: srv}) // or serial.New(serial.Config{...})
//	if err != nil { ... }
//	defer link.Close()
//	go func() {
//		for ev := range link.Events() { // closed after Close
//			switch ev.Kind {
//			case device.Ack:
//				// ev.DeviceID, ev.Ack.MessageID, ev.Ack.Code
//			case device.Heartbeat, device.Up, device.Down, device.Error:
//			}
//		}
//	}()
//	err = link.Send(ctx, "2042253", face.Command{MessageID: "m-1", Op: face.AddPerson,
//		Person: face.Person{ID: "951", Name: "Li Lei"}})
//
// Errors returned by a Link (and carried in Error events) are the link's own typed error
// with a Code; test them with errors.Is against the Code values of this package:
//
//	if errors.Is(err, device.ErrNotConnected) { /* retry later */ }
//
// # Caveats
//
//   - A Link does not enforce "one command in flight per terminal"; that is the caller's job
//     (the agent's outbox). A Link also does not match acks to commands or drop a second ack
//     for the same messageId: it reports what the terminal sent.
//   - Events must be drained. A Link blocks its receive path (and so, for MQTT, the
//     publishing client inside the broker) while the channel is full, rather than drop an
//     ack; Close unblocks it.
//   - Up and Down for a shared connection (MQTT) carry an empty DeviceID: they concern every
//     terminal on that link. A serial link carries one terminal and names it.
//   - Send returning nil means the command was handed to the transport (the broker accepted
//     the QoS 1 publish, or the bytes were written to the port), not that the terminal has it.
package device
