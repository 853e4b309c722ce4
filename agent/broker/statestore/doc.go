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
// The store's in-process owner uses the typed API instead, which takes and returns Go
// values and goes through the same checks as the RESP3 command of its verb (bounds,
// reserved prefixes, timestamps, fencing tokens, notifications, persistence):
//
//	v, err := s.Set("faceagent/gw/devices/d1", state, statestore.SetOptions{
//		Timestamp: clock.Now(), Expiry: 90 * time.Second, Owner: true})
//	clock.Observe(v) // as a client observes the response's __ts
//	value, version, err := s.Get("faceagent/gw/config") // ErrNotFound when missing
//	err = s.Watch("faceagent/gw/config", w)             // as KEYNOTIFY; Unwatch(w) ends it
//
// A refusal is an *Error holding the reply's text (ErrQuota, ErrNotAuthorized,
// ErrFencingNeeded…; errors.Is compares texts).
//
// Replies are exactly what the service sends (docs/design.md "State store
// wire facts", cited as "wire fact N" in this package): "+OK",
// ":1"/":0"/":-1", "$n value", "$-1", or "-ERR <text>" with one of the Err*
// texts. Do returns the version the response must carry in __ts, or a zero
// Timestamp when it carries none.
//
// KEYNOTIFY registers Request.Watcher, normally one per MQTT connection; the
// store calls Watcher.Notify after each change of a watched key, with the
// store locked, in version order. AppendNotification builds the payload. Call
// Unwatch when the connection goes away. NotifyQueue is a Watcher for one
// connection: it sends in order, never more unacknowledged notifications at a
// time than the connection's Receive Maximum (MQTT 5 section 3.3.4), and
// bounds what waits (past the bound it reports an overflow; agent/broker
// then disconnects the client, which registers again and rereads the keys).
// A notification's bytes count from Notify until the connection acknowledges
// it (NotifyQueueOptions.Send, Release), against the queue's bound and a
// ByteBudget the queues of all connections may share. Send may also answer
// NoRoom (agent/broker: the connection's session is full); the notification
// then waits at the head of the queue for an acknowledgement, as for room in
// the Receive Maximum. With AckTimeout, a notification waiting for room while
// the connection acknowledges nothing for that long ends the queue too
// (Stalled).
//
// # Bounds
//
// Options bound what clients can make the store hold; a request past a bound
// is answered "-ERR the quota has been exceeded" (ErrTextQuota, the protocol's
// one text for it, which every SDK recognises), counted in Stats.Refused by
// Bound and warned about at most once a minute per bound:
//
//   - MaxBytes: for each key its key and value bytes plus KeyOverhead (160,
//     above what BenchmarkMemoryPerKey measures), plus FenceOverhead and the
//     token's node id when it is fenced; for each KEYNOTIFY registration its
//     key bytes plus RegistrationOverhead (160, above what
//     BenchmarkMemoryPerRegistration measures), whether or not the key
//     exists. Registrations of one key share one copy of it. And what waits
//     for a snapshot: a notification of a
//     persistent change (or queued behind one) with its key and value bytes
//     plus DeferredOverhead, the answer DoDurable holds back with its reply and
//     Request.WaitBytes plus WaiterOverhead (160 each, together above what
//     BenchmarkMemoryPerWaitingChange measures). A change that would take the store
//     past MaxBytes with them is refused: while snapshot writes fail, those
//     fill the store, not the heap.
//   - MaxKeys, MaxValueSize.
//   - MaxKeySize: one key, in every command (GET, DEL and KEYNOTIFY of a key
//     that could never be stored are refused as SET is).
//   - MaxNotify: the registrations of one Watcher.
//
// ReservedPrefixes name keys only requests with Request.Owner (the
// in-process owner, never a network client) may write; everyone may read and
// watch them. The owner's writes there are not refused by MaxKeys or MaxBytes
// (they still count). The agent reserves its device-state keys this way, so
// that no client can write them, nor fence them against the agent.
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
// Close writes a final snapshot. A write that fails (a full disk) is tried
// again after a pause, 0.1 s doubling up to 5 s, until one succeeds, whether
// or not more changes come; the failure is logged once, then once a minute,
// and its end once. A change of the persistent set is notified
// to watchers only once a snapshot holding it is on disk (DoDurable holds the
// reply back likewise), so that no client acts on a change a crash would
// undo; later changes of the same key queue behind it, so the per-key order
// holds, while other keys' notifications are not delayed. On start the
// snapshot is loaded (expired keys skipped) and the clock observes every
// restored version, so versions never go back across a restart. A damaged
// snapshot makes New fail with ErrCorruptSnapshot and leaves the file for the
// operator.
//
// The snapshot is read and written one record at a time, so neither holds a
// second copy of the persistent set. Loading stays within the bounds, by one
// rule: records are taken in file order; one whose key or value is over
// MaxKeySize or MaxValueSize is left out (a frame longer than both together
// is not even read into memory), and so is one that would take the store past
// MaxKeys or MaxBytes (a later, smaller one may still fit). One warning names
// the counts. The file keeps what was left out until the next snapshot is
// written (the next change of a persistent key): restarting with the old
// bounds before that brings it back. A fencing token on a key under
// ReservedPrefixes is dropped at load.
//
// # Caveats
//
//   - Do (unlike DoDurable) reports a persistent change before its snapshot
//     reaches the disk; GET shows it at once too (as in the real service's
//     memory-first store). Only notifications and DoDurable wait for the
//     disk. While snapshot writes fail, the notifications of persistent
//     changes wait in memory (one per change of a watched key, within
//     MaxBytes) and are dropped, with an error logged, if Close cannot write
//     the snapshot. The snapshot rewrites every persistent key, which
//     suits the few configuration and lease keys it is meant for, not
//     hundreds of thousands of persistent keys; a persistent write costs a
//     snapshot write and two fsyncs of latency (writes in the meantime are
//     coalesced into one snapshot).
//   - One mutex serialises all operations. That is stronger than the per-key
//     order the protocol asks for and costs a few hundred nanoseconds per
//     request; it is not the bottleneck behind an MQTT broker.
//   - The engine trusts the caller for the MQTT preconditions (QoS, response
//     topic, correlation data); agent/broker checks them.
//   - MaxBytes counts estimates of the bookkeeping (KeyOverhead,
//     RegistrationOverhead), measured on amd64; the Go heap around live data
//     (GOGC) comes on top, so a store full to MaxBytes takes a multiple of
//     MaxBytes of RSS (docs/benchmarks.md, "State store bounds").
//   - Every bound answers the same text; Stats tells them apart.
package statestore
