// Package sim simulates face terminals speaking protocol v1 over MQTT (each terminal with
// its own broker connection, as real ones have) or over a serial line (a PTY's master end
// or a real port). It reproduces what real terminals do wrong: slow acks (fixed or a
// distribution), lost acks, refusals, offline periods, garbage, crashes in the middle of a
// command. Each terminal keeps its person list, so a test can assert the final whitelist.
// All randomness is seeded: terminal i draws from PCG(Seed, i+1).
//
// # Tutorial
//
//	fleet, err := sim.StartMQTT("mqtt://127.0.0.1:1883", []string{"2042253", "2042254"}, sim.Options{
//		Seed: 42, AckLatency: sim.Latency{Kind: sim.Exponential, A: 80 * time.Millisecond},
//		AckLoss: 0.05, HeartbeatInterval: 5 * time.Second, Strict: true,
//	})
//	if err != nil { ... }
//	defer fleet.Close()
//	fleet.WaitReady(ctx)
//	... run the agent ...
//	if err := fleet.Violations(); err != nil { t.Fatal(err) }
//	persons := fleet.Terminal("2042253").Persons()
//
// Over a serial line: p, _ := serial.OpenPTY(); give p.Path to the link and
// sim.SerialPort{DeviceID: "2042253", Port: p.Master} to StartSerial.
//
// # Terminal behaviour
//
// A command is applied and acked after AckLatency. AddPerson stores the person (replacing
// one with the same id), DeletePerson removes it. A resend of a messageId already answered
// is not executed again, only acked again with the same code (docs/protocol.md, "Message
// ids and duplicates": the terminal's duty); a refused messageId stays
// refused. Copies of one messageId waiting at once are answered once each, and only the
// first answer executes. A lost ack means the command was applied and the terminal thinks
// it answered. A crash applies the command or not (even odds), never acks it, forgets every
// pending command, (serial) leaves a cut frame on the line, and keeps the terminal offline
// for CrashDowntime. Offline terminals drop what arrives (Stats.Dropped).
//
// # Strict mode: the one-in-flight rule, precisely
//
// A messageId is "unacked" from the moment the terminal first receives it until the
// terminal answers it for the first time (sends the ack, or loses it: the terminal believes
// it answered), or forgets it (crash, offline period). A command C arriving while some other
// command P is unacked is a violation unless C equals P in every field (same messageId, op
// and person): that is the agent's own resend of the very command in flight after its retry
// interval, which docs/protocol.md allows. A repeated messageId with different content is a
// violation. Copies of an already answered messageId that still wait for their repeated ack
// do not count: when latency exceeds the agent's retry interval, the agent sends the next
// command after the first ack while the resend is still queued in the terminal, and that is
// correct behaviour. Violations are counted, logged at error
// level, passed to Options.OnViolation, and returned by Fleet.Violations; facesim exits
// with status 3 when there were any.
//
// # Caveats
//
//   - A lost ack is decided when the command arrives, from the terminal's generator; with the
//     same seed and the same command order the same acks are lost.
//   - Over MQTT an offline terminal disconnects (clean session): commands sent meanwhile are
//     gone, as with real terminals; over serial it reads and discards.
//   - Heartbeat times are the host's clock in RFC 3339, whole seconds.
//   - A terminal speaks MQTT 5 through the few packets it needs (internal/mqttwire), not
//     through paho: the same bytes on the wire as the autopaho client it
//     replaced (a test compares them) and the same connection behaviour (keepalive 20 s,
//     reconnect after 200 ms, clean start), at a fraction of the CPU and garbage, so that
//     64 terminals in a benchmark take less of the machine from what they measure.
//     Brokers: mqtt:// and tcp://, or mqtts://, ssl:// and tls:// with Options.TLS (a
//     client certificate for mutual TLS goes there); Options.Username and Password for a
//     broker with a users file. No websockets.
//   - Commands are read and acks written with device/face's codec, the agent's own.
package sim
