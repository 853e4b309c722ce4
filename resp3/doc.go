// Package resp3 is a zero-allocation RESP3 reader and writer, built for the state store's
// MQTT payloads (its protocol document: docs/design.md "State store wire facts"; RESP3:
// https://github.com/redis/redis-specifications/blob/master/protocol/RESP3.md).
//
// MQTT delivers whole messages, so the reader works on a complete []byte and returns views
// (sub-slices) into it instead of copies.
//
// # Validity of returned views
//
// Every []byte the reader returns (Value.Str, command arguments, rest) is a view into the input:
// it is valid while the input slice lives and is not modified. Copy what you keep beyond that
// (string(v.Str), bytes.Clone). Command arguments are capacity-limited views, so appending to
// one cannot overwrite the bytes after it.
//
// # Reading
//
// A server parses a request with ParseCommand into a reused argument slice:
//
//	args := make([][]byte, 0, 8)
//	args, err := resp3.ParseCommand(payload, args) // "SET" "key" "value" …
//
// A client reads a scalar reply with ParseValue (the whole payload must be one token) or
// ReadValue (one token, then the rest):
//
//	v, err := resp3.ParseValue(payload)
//	switch {
//	case v.IsNull():              // "$-1": no such key
//	case v.Kind == resp3.Integer: // ":-1": not applied; ":1": deleted
//	}
//
// For an aggregate, ReadValue returns its header (Kind, Len) and the elements follow in rest.
// ReadTree reads one whole nested value into a reused []Value in pre-order, Skip validates
// and steps over one, and ParseTree insists that nothing follows.
//
// # Errors
//
// ErrIncomplete (errors.Is) means the input is a valid prefix and more bytes are needed —
// every proper prefix of a valid message gives it. ErrLengthPastBuffer is the special case of
// a blob whose declared length runs past the end; it matches ErrIncomplete. A caller holding a
// whole message (an MQTT payload) treats both as "truncated". Everything else is a
// *SyntaxError (errors.As gives the byte offset) wrapping a sentinel (ErrMissingCRLF,
// ErrOverflow, ErrTooDeep, …) and matching ErrMalformed; IsMalformed tells the two classes
// apart. No input makes a reader panic or loop.
//
// # Writing
//
// The Append functions append one token to dst and return it, like strconv.AppendInt; they do
// not allocate when dst has room:
//
//	buf = resp3.AppendArrayHeader(buf[:0], 3)
//	buf = resp3.AppendBlobString(buf, "SET")
//	buf = resp3.AppendBlob(buf, key)
//	buf = resp3.AppendBlob(buf, value)
//
// Re-encoding: AppendValue of each token ReadTree returned rebuilds the input byte for byte,
// because lengths and counts are accepted only in canonical form and text-carrying kinds keep
// their text. The exception is Integer: ":+7", ":007" and ":-0" are accepted (RESP3 allows a
// sign) and written back canonically (":7", ":7", ":0").
//
// # Caveats
//
//   - Streamed strings and aggregates ("$?", ";", ".") are not supported: they are
//     ErrInvalidLength or ErrUnknownType. The state store never sends them.
//   - Lengths and counts must be canonical decimals: no sign, no leading zeros ("$03" is
//     ErrInvalidLength, as in Redis). "-1" is accepted only as the RESP2 nulls "$-1" and "*-1";
//     on other kinds it is ErrNegativeLength.
//   - Bounds are fixed: MaxBlobLen (512 MiB), MaxElements per aggregate (1<<20), MaxDepth (64
//     nested non-empty aggregates, counted by Skip/ReadTree/ParseTree; an attribute's pairs
//     count as one level). A declared count is not trusted for allocation: ReadTree grows dst
//     only as tokens actually arrive.
//   - ParseCommand rejects "*0" and "*-1" (no command name), null and non-blob arguments
//     (ErrNotCommand), and more arguments than cap(args) (ErrTooManyElements).
//   - Doubles and big numbers are validated and returned as text; Value.Float parses a
//     double on demand. A big number is [-]digits (no '+').
//   - The writers do not validate: a simple string or error containing CR or LF produces bytes
//     no reader accepts. Use the blob writers for arbitrary bytes.
//   - The readers store views of the input through a pointer, so a caller's stack-allocated
//     input (a small []byte literal) moves to the heap. Payloads from the network already
//     live there; ReadValue, ParseCommand, ReadTree and Skip then allocate nothing except the
//     error for malformed input.
//   - All functions are safe for concurrent use; they share no state.
package resp3
