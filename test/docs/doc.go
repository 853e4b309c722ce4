// Package docs runs the examples of the project's documents: every fenced block in docs/*.md
// marked as an example is checked with the product's own parsers, so a format change that
// leaves a document behind fails the build (docs_test.go).
//
// # Marking an example
//
// An HTML comment on the line right before a fenced block (or, for rev-table, before a
// Markdown table) marks it; Markdown renderers do not show it:
//
//	<!-- example: task -->
//	```json
//	{"taskId":"t-1","deviceId":"2042253","op":"AddPerson","person":{"id":"951"}}
//	```
//
// The kinds, and what each must pass:
//
//   - task: a task message (one task or an array) that agent/wire.Parse takes whole, with
//     every device known but "9999" (the documents' unknown terminal).
//   - result: agent/wire.ParseResult; when a task example of the same document has its
//     taskId, the result's messageId must be that task's.
//   - deadletter: agent/wire.ParseDeadLetter, and its payload (a JSON string: the bytes in
//     it), parsed as a task message, must be refused with the reason given (the reason may
//     start with an array index, "task N: ").
//   - syncreport: one sync report a line, each agent/wire.ParseSyncReport.
//   - control, config-status, control-status: agent/remote's ControlCommand and Status, no
//     unknown field.
//   - page-state: the operator page's JSON (GET /api/state): agent/ui's State, no unknown
//     field, and every field the page always sends (no omitempty) present.
//   - command, ack, heartbeat: device/face.Parse{Command,Ack,Heartbeat}JSON (protocol v1 and
//     v2, ListPersons pages included); a command's person with a rev must carry
//     device/face.RecordRev of its fields.
//   - rev-table: a Markdown table with columns id, name, validFrom, validTo, face, rev
//     ("(none)" for an empty field): each row's rev is RecordRev of the others.
//   - digest: lines "member(ID) = …("ID\nREV")… = HEX" and "digest {ID, …} = … = HEX": each
//     member is device/face.Member, each digest the XOR of its members.
//   - msgp: a hex dump of one msgp-encoded command, which device/face.ParseCommandMsg reads and
//     the gateway's encoder writes byte for byte.
//   - frame: a hex dump of one serial frame: device/serial.ReadFrame decodes it, its payload
//     is a valid message of its kind, and the gateway's encoder writes these very bytes.
//
// A hex dump's lines may carry annotations: on each line the leading two-digit hex tokens
// are the bytes, the rest is ignored.
//
// An unknown kind, a marker not followed by its block, and a document with fewer examples
// than it had (minExamples) fail too, so an example cannot silently drop out of the test.
package docs
