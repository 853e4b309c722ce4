// Package mqttlink is a device.Link to face terminals on local MQTT: protocol v1 as JSON on
// dev/face/{id} (commands, QoS 1), dev/face/{id}/Ack and dev/face/{id}/heartbeat
// (docs/protocol.md "MQTT transport"). Every terminal shares one broker connection: the
// link subscribes to one wildcard filter per message kind (dev/face/+/Ack,
// dev/face/+/heartbeat) and routes what arrives by the {id} level of its topic.
//
// Two ways to reach the broker:
//
//   - Config.Bus: an in-process broker (agent/broker's Broker satisfies Bus). The link
//     subscribes and publishes through it (Bus.SubscribeInline, Bus.Publish): no socket,
//     no second connection, up as long as the process is.
//   - Config.URL: an external broker (a local mosquitto, the cluster's broker) through one
//     autopaho connection that reconnects by itself (exponential backoff up to
//     ReconnectMax) and resubscribes on every connection.
//
// # Tutorial
//
//	link, err := mqttlink.New(mqttlink.Config{URL: "mqtt://127.0.0.1:1883"})
//	if err != nil { ... }  // *mqttlink.Error with device.ErrConfig
//	defer link.Close()
//	// after a device.Up event:
//	err = link.Send(ctx, "2042253", cmd) // returns after the broker's PUBACK
//	for ev := range link.Events() { ... } // acks and heartbeats carry the terminal's id
//
// Firmware with other topics: CommandTopic "site/{id}/cmd", AckTopic "site/{id}/ack", ….
// "{id}" must be one whole topic level.
//
// # Caveats
//
//   - Up and Down concern the whole connection (DeviceID ""). They are coalesced: a flapping
//     connection yields alternating Up/Down events, never two of a kind in a row.
//   - Send's nil means the broker accepted the command (PUBACK for QoS 1 over URL; the inline
//     publish has no PUBACK and returns once the broker queued it for the subscribers). A terminal
//     that is offline with a clean session never gets it: the agent's retry covers that.
//   - Inline mode holds the first command after a terminal's heartbeat on a new connection
//     when nobody is subscribed to its topic yet (a terminal that announces itself before
//     its SUBSCRIBE), and publishes it when that connection's SUBSCRIBE gives the topic a
//     subscriber. Send returns nil for it all the same; a held command superseded by a newer
//     Send, never subscribed for, or whose terminal subscribes on another connection (it
//     went away and came back meanwhile) is dropped, and the agent's retry covers it.
//   - Malformed acks and heartbeats, and messages from terminals outside Config.Devices, are
//     Error events with the device id and topic, never dropped silently.
//   - Inline mode does not hear messages published in-process (its own commands included):
//     Bus.SubscribeInline passes on network clients' messages only.
//   - Received messages are handled on the broker's (or paho's) delivery goroutine; a full
//     Events channel holds that delivery back rather than drop an ack. Drain Events.
//   - Config.Deliver runs on that delivery goroutine too (with Bus: the terminal's own
//     connection goroutine, which has already sent the PUBACK for the ack). A slow Deliver
//     holds back that terminal's messages; a Send from inside it is fine (the agent sends
//     the next command there). Events taken by Deliver and events on Events are two
//     paths: an ack taken by Deliver may be handled before an Up still in the channel.
//   - SendsWithoutBlocking is true with Bus: the inline publish queues the command in the
//     broker and never waits; the broker drops it (and Send still returns nil) when the
//     terminal's pending-writes queue is full.
//   - With SessionExpiry = 0 (the default) acks published while the link is disconnected are
//     lost; set it (and a fixed ClientID) to have the broker keep them.
package mqttlink
