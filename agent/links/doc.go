// Package links is the agent's side of the terminals: it opens one link per transport
// (device/mqttlink for every MQTT terminal, device/serial per serial terminal), sends each
// command to its terminal's link for the outbox (Links is the outbox's Sender), and routes
// what the terminals send back (acks, heartbeats, link changes) to the dispatcher, the
// forwarder of acks and heartbeats upstream, and the terminal state writer, through the
// small interfaces Outbox, Forwarder and State. An ack reaches the dispatcher whole
// (Outbox.AckMessage), so that the answer a query's ack carries (a ListPersons page:
// persons and next) reaches whoever asked it through the outbox (outbox.Query).
//
// A command's stored payload, a task's or a query's, is its face.Command in msgp
// (face.Command.AppendMsg); Send decodes it and hands it to the terminal's link.
//
// # Tutorial
//
//	l, err := links.Open(links.Options{MQTT: []string{"d1", "d2"}, Bus: embeddedBroker,
//		Serial: []links.Serial{{DeviceID: "d3", Port: "/dev/ttyS1", Baud: 115200}}})
//	if err != nil { ... }
//	ob, err := outbox.Open(dir, l, &outbox.Options{})
//	l.Start(links.Sinks{Outbox: ob, Forwarder: fwd, State: state})
//	...
//	l.Close() // the links' Events channels close: the pumps end
//	l.Wait()
//
// # Invariants
//
//   - MQTT terminals' acks are handled on the goroutine that received them (mqttlink's
//     Config.Deliver) once Start has run: the next command to that terminal leaves from
//     there, with no hand-off. Before Start they wait in the link's Events channel.
//   - Heartbeats, link Up/Down and errors go through one pump goroutine per link, in the
//     order the link reported them.
//   - An ack's every field reaches the dispatcher (persons and next included): neither
//     link drops a field of face.Ack, and the pumps pass it on as decoded.
//
// # Caveats
//
//   - An ack a terminal sent after a heartbeat may be handled before that heartbeat (the
//     ack directly, the heartbeat through the pump): both mark the terminal online, so only
//     their order upstream can differ, on two different topics.
//   - Up and Down of the shared MQTT connection concern every MQTT terminal at once.
//   - The Sinks' methods run on terminals' delivery goroutines: they must not block long,
//     or that terminal's messages wait.
package links
