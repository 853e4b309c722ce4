// Package sim simulates face terminals speaking protocol v2 (or v1: Options.Protocol) over
// MQTT (each terminal with its own broker connection, as real ones have) or over a serial
// line (a PTY's master end or a real port). It reproduces what real terminals do wrong: slow acks (fixed or a
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
// # Protocol v2
//
// A v2 terminal (the default) stores each person with the rev the agent sent (a person
// stored without one lists as 0000000000000000), keeps the digest of its persons by XOR on
// every change, and sends protocol 2, its serial ("FS-<id>-1" at first), its digest and
// Options.Capacity in every heartbeat. ListPersons is answered from the ids kept in bytewise
// order: the ids after "after", at most limit (0: 100), next the page's last id while more
// follow and "" at the end; a repeated ListPersons is acked again with the list as it is
// then (reading applies nothing). A v1 terminal (Options.Protocol 1, or SetProtocol(1))
// sends v1 heartbeats, keeps no rev and refuses ListPersons with UnknownOpCode, as it
// refuses any op it does not know; a full terminal refuses a new person with CapacityCode.
//
// # Faces and batches
//
// A v2 terminal keeps the faces it was sent by SHA-256 and receives one face at a time,
// by the resume rule: a PutFace whose offset is the terminal's have for that face adds its
// bytes; any other offset is ignored (ack code 0 with the have as it is); a face held
// answers have = its size; a chunk past the size, or a complete face whose bytes hash to
// something else, is FaceHashCode (22) and the face is discarded (have 0). A chunk at
// offset 0 of another face starts that one and drops the face being received. A repeated
// messageId is answered with the have of that moment. Terminal.Face gives a face's bytes,
// exactly as received.
//
// AddPerson and AddPersons take a person whose face the terminal holds, and refuse one
// whose face it does not with FaceMissingCode (21); a new person on a full terminal is
// CapacityCode (23). AddPersons needs Options.Batch > 0 (announced as "batch" in the
// heartbeat; otherwise it is an unknown op) and at most that many persons (otherwise
// BatchTooLargeCode, the whole batch); its ack carries one result per person, in order,
// and a repeat of its messageId the same results. Options.PersonTime adds the time one
// person takes to the ack's latency, per person.
//
// Options.CutFace (or Terminal.SetCutFace) cuts the first transfer of each face once the
// terminal holds that many bytes of it: it keeps the chunk up to there and crashes before
// acking, so the agent's resend learns the have it kept and resumes there.
//
// Options.Baud paces a serial terminal to baud/10 bytes a second each way, in pieces of
// 64 bytes: a write returns once its bytes would have crossed the line, and bytes the
// other side wrote at once reach the terminal at the line's speed. A pty does not pace.
//
// Knobs a test turns while the fleet runs, each on one Terminal: SetProtocol, SetCapacity,
// SetBatch, SetCutFace, DeleteFace, TamperFace,
// FactoryReset (no persons, digest 0, no memory of messageIds, same serial), Replace (the
// same and a new serial), TamperAdd / TamperDelete / TamperRev (hand edits at the terminal,
// bypassing the agent), RefuseNext (refuse the next command of an op for a person, once),
// SendHeartbeat (now, not at the next tick), GoOffline (offline for a while, then back with a
// heartbeat). Options.OnCommand shows a test every command
// a terminal is sent, in arrival order.
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
//   - Faces are kept in memory, until a factory reset or a replacement; the simulator is a
//     test tool, not bounded by a flash size.
//   - Over serial a ListPersons page must fit one frame (4,608 bytes by default): the
//     terminal answers exactly the page asked for, and an ack too large for a frame is not
//     sent; face.ListLimitFor gives a limit that always fits.
package sim
