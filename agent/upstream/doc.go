// Package upstream is the agent's connection to an external MQTT 5 broker (the back
// office's, or a cluster's): it takes task messages from the gateway's tasks topic and
// hands them to the intake, and it carries the reports (results, deadletters, forwarded
// acks and heartbeats) there as a publish.Pipelined, several QoS 1 messages in flight at
// once. It is built on paho's autopaho, which connects and reconnects, with a session of
// its own (pipeline.go) that adds what paho lacks: a publish that writes a message and
// returns a handle to wait for its PUBACK.
//
// # Tutorial
//
//	m := upstream.NewMetrics(registry)
//	connected, events := make(chan struct{}), make(chan struct{}, 1)
//	c, err := upstream.Dial(ctx, &upstream.Options{
//		URL: "mqtts://bo.example:8883", ClientID: "faceagent-gw1",
//		TLS:           upstream.TLSOptions{CAFile: "/etc/faceagent/ca.pem"},
//		KeepAlive:     30 * time.Second, SessionExpiry: 24 * time.Hour,
//		ReconnectMax:  30 * time.Second,
//		TasksTopic:    "faceagent/gw1/tasks",
//		Tasks:         intake, // Accept(ctx, payload) error: nil once stored for good
//		Connected:     connected, Events: events, Metrics: m, Logger: log,
//	})
//	if err != nil { ... } // a bad URL or TLS file; the broker being away is not an error
//	defer c.Close(stopCtx)
//	// Reports: one at a time, or a batch in order with a window in flight.
//	err = c.Publish(ctx, "faceagent/gw1/results", payload) // returns after the PUBACK
//	n, err := publish.InOrder(ctx, c, len(batch), msg)    // the first n were accepted
//
// Dial returns at once; the connection comes up in the background. Publish and
// PublishAsync wait for it (bounded by their ctx), Connected is closed when the tasks are
// first subscribed, Events is signalled on every subscription and every loss.
//
// # What holds
//
//   - The session persists: clean start only on the very first connection of the process,
//     the broker keeps it for SessionExpiry while the agent is away, and Close sends a
//     DISCONNECT that leaves it in place. A task message is acknowledged (in arrival
//     order, once the handler returned) only after Tasks.Accept returned nil for it; one
//     Accept refused gets no PUBACK and the connection is dropped, so the broker delivers it
//     again on the next connection, with the tasks that followed it on the dropped one
//     (neither taken nor acknowledged there, as their PUBACKs would overtake its). Tasks
//     are at least once: the intake recognises redeliveries.
//   - Reports are at least once, and their first copies arrive in the order they were
//     published: a message is stored in the session and written under one lock, in the
//     order of the calls, on one connection, where MQTT keeps the order of QoS 1 messages.
//     A Pending answers nil only for a PUBACK with a success code.
//   - A reconnect resubscribes the tasks. If the broker kept the session, paho sends the
//     messages still in flight again (DUP) and their PUBACKs reach the same handles. If it
//     did not, every handle in flight fails, and PublishAsync refuses a message whose
//     predecessor was lost with it, so the stream sends everything from the first message
//     not accepted again (publish.InOrder's prefix) before anything newer: a copy may
//     repeat, none is lost, no first copy overtakes another. With SessionExpiry 0 a loss of
//     the connection alone fails the handles.
//   - The window: Window is how many messages one stream keeps in flight (PublishWindow,
//     64 by default). The broker's Receive Maximum bounds the connection as a whole, across
//     streams: paho waits for a free slot, so a broker that allows fewer never sees more.
//     A handle whose PUBACK is not back 30s after its wait began fails, and the stream
//     sends it and what followed again.
//   - Reconnects back off from 100ms to ReconnectMax, randomised, so gateways do not come
//     back in step after a broker restart.
//   - Metrics: faceagent_upstream_connected is 1 from a subscription of the tasks to the
//     next loss; faceagent_upstream_connects_total counts those subscriptions.
//
// # Caveats
//
//   - Accept runs on paho's handler goroutine, which also carries the PUBACKs of reports:
//     an Accept that blocks stalls both. It gets context.Background(); it must bound its
//     own work.
//   - paho's session is kept in memory: what was in flight when the process ended is not
//     resent by this package. The report streams journal their messages and publish them
//     again after a start; the broker's copy of the session still redelivers tasks.
//   - Every message in flight is kept in the session, encoded, until its PUBACK: the memory
//     in flight is about the window times the streams times a message's size.
//   - A task refused again and again (a journal that fails) drops the connection each time
//     it is delivered: the connection comes back within 100–200ms and logs one error per
//     refusal, until Accept takes it (the deadletter backlog has room again) or the agent
//     is restarted (the root reports a failed journal as needing a restart).
//   - paho's log lines go to Logger: its errors at Warn, its per-packet trace at Debug.
//   - Events has room for one signal: several events between two reads are one.
//   - Errors name the configuration keys ("upstream.url", "upstream.tls_ca",
//     "upstream.tls_cert") the root maps onto Options, so an operator knows what to fix.
package upstream
