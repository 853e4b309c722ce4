// Package statestore is the engine of the embedded Azure IoT Operations state
// store: keys, HLC versions, fencing tokens, NX/NEX/PX, expiry, KEYNOTIFY
// registrations, quotas, key-prefix authorization and persistence of the keys
// written with "aio-persistence: true". It has no MQTT in it: package
// agent/broker feeds it the payload and user properties of each request
// published on statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke
// and sends the reply it returns. Being MQTT-free, it is benchmarked and fuzzed
// in-process.
//
// # Tutorial
//
//	s, err := statestore.New(&statestore.Options{MaxKeys: 10000})
//	if err != nil { ... }
//	defer s.Close()
//
//	reply, version := s.Do(&statestore.Request{
//		Payload:      []byte("*3\r\n$3\r\nSET\r\n$4\r\nlock\r\n$2\r\nme\r\n"),
//		Timestamp:    "1696374425000:00000:client", // the __ts user property
//		HasTimestamp: true,
//	}, nil)
//	// reply is "+OK\r\n"; version (the response's __ts) is greater than
//	// the request's timestamp.
//
// Replies are exactly what the service sends (DESIGN.md, state store wire
// facts): "+OK", ":1"/":0"/":-1", "$n value", "$-1", or "-ERR <text>" with
// one of the Err* texts. Do returns the version the response must carry in
// __ts, or a zero Timestamp when it carries none.
//
// KEYNOTIFY registers Request.Watcher, normally one per MQTT connection; the
// store calls Watcher.Notify after each change of a watched key, with the
// store locked, in version order. AppendNotification builds the payload. Call
// Unwatch when the connection goes away. NotifyQueue is a Watcher for one
// connection: it sends in order, never more unacknowledged notifications at a
// time than the connection's Receive Maximum (MQTT 5 section 3.3.4), and
// bounds what waits (past the bound it reports an overflow; agent/broker
// then disconnects the client, which registers again and rereads the keys).
//
// # Versions and fencing
//
// Every applied SET takes a new version from the store's hlc.Clock, updated
// with the request's __ts, so it is greater than both the request's
// timestamp and every version issued before. A DELETE notification carries a
// fresh version too, so per key the notifications' versions increase. A key
// written with __ft is fenced: later SET, DEL and VDEL need a token not older
// than the stored one (the document's algorithm); a newer token replaces it.
// A condition that refuses the request (NX, NEX, VDEL's value) answers ":-1"
// before the token is checked: the token guards writes, and that request
// writes nothing (the evidence for this order is at checkFence).
//
// # Expiry
//
// PX deadlines live in a min-heap indexed from the entries; one goroutine
// sleeps until the earliest deadline, removes what expired and sends DELETE
// notifications. A renewal moves the entry within the heap, so renewals do
// not grow it. Any access to an expired key removes it first, so it is
// invisible the moment its deadline passes.
//
// # Persistence
//
// With Options.SnapshotPath, a SET carrying Request.Persist marks the key
// persistent; a later SET without it makes the key volatile again, as does
// deleting it. Requests only mark the persistent set dirty; a background
// goroutine writes the whole persistent set to a snapshot file: a magic, then
// msgp records each framed with its length and a CRC32C, written to a
// temporary file, fsynced, renamed over the old snapshot, and the directory
// fsynced. Changes arriving during a write are coalesced into the next one;
// Close writes a final snapshot. A change of the persistent set is notified
// to watchers only once a snapshot holding it is on disk (DoDurable holds the
// reply back likewise), so that no client acts on a change a crash would
// undo; later changes of the same key queue behind it, so the per-key order
// holds, while other keys' notifications are not delayed. On start the
// snapshot is loaded (expired keys
// skipped) and the clock observes every restored version, so versions never
// go back across a restart. A damaged snapshot makes New fail with
// ErrCorruptSnapshot and leaves the file for the operator.
//
// # Caveats
//
//   - Do (unlike DoDurable) reports a persistent change before its snapshot
//     reaches the disk; GET shows it at once too (as in the real service's
//     memory-first store). Only notifications and DoDurable wait for the
//     disk. While snapshot writes fail, the notifications of persistent
//     changes wait in memory (one per change of a watched key) and are
//     dropped, with an error logged, if Close cannot write the snapshot. The snapshot rewrites every persistent key, which
//     suits the few configuration and lease keys it is meant for, not
//     hundreds of thousands of persistent keys; a persistent write costs a
//     snapshot write and two fsyncs of latency (writes in the meantime are
//     coalesced into one snapshot).
//   - One mutex serialises all operations. That is stronger than the per-key
//     order the protocol asks for and costs a few hundred nanoseconds per
//     request; it is not the bottleneck behind an MQTT broker.
//   - The engine trusts the caller for the MQTT preconditions (QoS, response
//     topic, correlation data); agent/broker checks them.
//   - Quotas count key and value bytes only, not the per-key bookkeeping
//     (about 130 bytes, see docs/benchmarks.md).
package statestore
