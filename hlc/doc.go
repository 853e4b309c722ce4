// Package hlc implements the hybrid logical clock the state store versions values with: the
// "{wallClock}:{counter}:{nodeId}" timestamps carried in the MQTT user properties __ts (a
// request's time, a value's version) and __ft (a fencing token), and the clock that issues them.
//
// # Timestamps
//
// A Timestamp is a wall clock in milliseconds since the Unix epoch, a counter that orders events
// within one millisecond, and the id of the node that issued it. Compare orders timestamps
// totally by wall, then counter, then node id.
//
// The SDKs write the padded form, fmt's "%015d:%05d:%s"; the protocol document's examples are
// unpadded. Parse and ParseString read both; AppendText and String write the padded form
// (docs/design.md, wire fact 7):
//
//	ts, err := hlc.ParseString("1696374425000:0:CLIENT")
//	if err != nil { … } // errors.Is(err, hlc.ErrNotNumber) and friends; see ParseError
//	buf = ts.AppendText(buf[:0]) // "001696374425000:00000:CLIENT"
//
// Bounds: the wall clock is 0 … math.MaxInt64, the counter 0 … math.MaxUint32, the node id is
// not empty and contains no ':'. Anything else is a *ParseError naming the segment at fault.
// The SDKs read the wall as an int64 (Go), u64 (Rust) or double (.NET) and the counter as a
// uint64 (Go), u64 (Rust) or int32 (.NET); this package's bounds cover every value they write
// in practice (counters restart at 0 every millisecond) and a Clock never issues a counter .NET
// cannot read (MaxCounter). Parse is stricter than strconv: no '+' or '-' sign, digits only.
//
// # Clocks
//
// A Clock issues timestamps for one node. Now stamps a local event or an outgoing message;
// Update stamps the receipt of a message carrying a remote timestamp and returns a value greater
// than it; Observe only merges a remote timestamp, so that later timestamps exceed it. The
// state store runs one clock, node "StateStore":
//
//	clock := hlc.NewClock("StateStore")
//	version, err := clock.Update(requestTS) // SET: the new version of the key
//	if errors.Is(err, hlc.ErrTooFarAhead) {
//		// answer "the request timestamp is too far in the future"
//	}
//
// and a client runs one for all its requests (the SDKs keep one per process):
//
//	clock := hlc.NewClock(clientID)
//	ts := clock.Now()     // __ts of the request
//	clock.Observe(respTS) // __ts of the response
//
// A remote timestamp more than the max drift (WithMaxDrift, default one minute) ahead of the
// local physical clock is refused with ErrTooFarAhead and leaves the clock unchanged, so one
// peer with a bad clock cannot drag everybody's versions into the future. The invariants a
// Clock keeps (monotonic, bounded drift) are listed on the Clock type. Tests inject the
// physical clock with WithWallClock.
//
// # Caveats
//
//   - Parse returns Node as a string without allocating by interning node ids: a fixed table of
//     256 recently seen ids of at most 64 bytes each, shared by the process and safe for
//     concurrent use. Longer ids, and more distinct live peers than the table holds, cost one
//     allocation per Parse; memory stays bounded (at most 256 × 64 bytes of id text) whatever
//     ids arrive.
//   - A Clock issues counters up to MaxCounter (2³¹-2, what the .NET SDK can read); beyond it
//     the wall moves one millisecond on. That takes 2³¹ timestamps within one millisecond, or,
//     after the physical clock jumped back, 2³¹ timestamps before it catches up again.
//   - A Clock is not persisted. After a restart, Restore the largest version stored before
//     issuing new ones, or a physical clock that went backwards meanwhile could re-issue smaller
//     versions. (Observe would not do: it ignores timestamps beyond the max drift.)
//   - Physical readings are clamped into [0, MaxWall]; a physical clock before 1970 reads as 0.
//   - MaxDrift is enforced in whole milliseconds; the check compares remote walls with the
//     physical reading, not with the clock's own (possibly further ahead) wall, so a clock that
//     jumped backwards still accepts peers within the drift of real time.
//   - Observe ignores, without an error, a remote timestamp Update would refuse; use
//     CheckDrift when the caller must know.
//   - NewClock does not fail on an invalid node id: it replaces ':' with '_' and an empty id
//     with a random one. Validate a configured id with ValidNode to refuse it instead.
package hlc
