// Package wire is the agent's upstream message format: task messages from the back
// office (parsed, bounded and validated), the deadletter messages for what is refused, the
// result messages, the whitelist sync reports (SyncReport), the terminal state record
// (DeviceState), the topics, and the stable MessageID a task's command carries to the
// terminal.
// It is a data package: no I/O.
//
// # Tutorial
//
//	batch := wire.Parse(payload, wire.Limits{
//		MaxBatch:       cfg.Intake.MaxBatch,
//		MaxMessageSize: int(cfg.Intake.MaxMessageSize),
//		MaxWhitelist:   wire.DefaultMaxWhitelist, // 0 refuses SetWhitelist tasks
//		KnownDevice:    func(id string) bool { return cfg.Device(id) != nil },
//	})
//	for i := range batch.Tasks {
//		cmd := batch.Command(i) // face.Command with the task's MessageID (hashed once, by Parse)
//		if batch.Tasks[i].Op == wire.SetWhitelist {
//			_ = batch.Tasks[i].Persons // the desired list, decoded once: keep this slice
//		}
//		_ = cmd // journal it, then acknowledge the message upstream
//	}
//	for _, r := range batch.Rejects {
//		dl, _ := json.Marshal(r) // {"reason":"…","payload":…} for faceagent/{gw}/deadletter
//		_ = dl
//	}
//
// # Rules
//
//   - A message is one task object or a JSON array of them (at most Limits.MaxBatch).
//   - In a batch, good tasks are accepted and each bad one is refused on its own, with its
//     index in the reason ("task 3: unknown device \"x\""). A repeated taskId within one
//     batch is refused.
//   - AddPerson and DeletePerson carry one "person"; SetWhitelist carries "persons", the
//     terminal's whole desired list (at most Limits.MaxWhitelist persons, each checked as
//     an AddPerson's person, no id twice; [] clears the list). A SetWhitelist's command is
//     no terminal command: it stands for the task in the outbox until its result, which
//     counts the persons added, deleted and unchanged (Result.WhitelistCounts).
//   - A person of AddPerson or SetWhitelist may carry a face,
//     "face":{"sha256","kind","size","data"}: Task.Faces lists them with their person's
//     index. "data" (standard padded base64) may be left out when the gateway holds the
//     face already (the intake checks: no store is known here). Parse decodes the base64
//     once, straight from the message into one buffer (a string with escapes such as "\/"
//     a chunk at a time), and refuses a face whose data does not hash to its sha256, whose
//     stated size differs, whose sha256 is not 64 lower-case hex digits or whose kind is
//     neither "template" nor "photo", naming the person and the field
//     ("persons[2] (id \"c\"): face.data: hashes to …"). A DeletePerson's face is ignored.
//     The face's sha256 is part of the task's MessageID; a task without faces keeps its id.
//     An AddPerson's command carries the face's ref (sha256, size, kind; no data) and the
//     rev of the record with the face's hash (face.PersonRecordRev), as the desired record
//     does; the persons in Person and Persons carry no face (Faces has them).
//     A task with a 100 KiB face costs about 105 KiB of transient memory beyond its message,
//     3.5 times the face in a message with a reject (docs/benchmarks.md, "Faces in tasks").
//   - Unknown JSON fields are ignored, so the back office can add fields without breaking
//     older gateways; required fields catch misspelt ones.
//   - Parse never fails as a whole: the caller acknowledges every message and
//     dead-letters the rejects, so a bad message is not redelivered forever.
//
// # Caveats
//
//   - MessageID hashes every field of the task: it is stable for the task, not for the
//     person. It is pinned by a test; changing the scheme would make terminals see resent
//     commands as new after an upgrade.
//   - Parse decodes a message with nothing to refuse in one pass; a message with any
//     reject is decoded again element by element to word each reason, so a bad message
//     costs about twice a good one. The one pass reads plain JSON (exact key names, no
//     escapes, no unknown fields: what back offices write) by hand and leaves anything
//     else to encoding/json; both give the same tasks.
//   - ParseResult reads the agent's own result form by hand and leaves any other spelling
//     of it (escapes, other key case, floats) to encoding/json: both give the same Result.
//   - Deadletter payloads that are not JSON are kept as a string of at most
//     MaxDeadLetterPayload bytes.
package wire
