// Package backlog is the agent's queue of messages for upstream that must survive a
// restart: a journalled, ordered, bounded backlog, published in order and removed only
// once the upstream broker accepted it. The deadletters and the terminals' forwarded acks
// and heartbeats are backlogs (agent/report); the results have their backlog in the
// outbox's journal, and are published by the same Drainer through the Source interface.
//
// # Tutorial
//
//	b, err := backlog.Open(dir, backlog.Options{
//		Journal:    journal.Options{Sync: journal.SyncAlways, SegmentSize: backlog.SegmentSize},
//		Kinds:      []backlog.Kind{{Code: 'A', Name: "ack", Droppable: true}, {Code: 'H', Name: "heartbeat", Coalesce: true}},
//		Keyed:      true,                                        // entries carry a key (a device id)
//		Durability: backlog.WriteBehind(50 * time.Millisecond), // or backlog.Durable()
//		MaxCount:   8192, MaxBytes: 1 << 20, Policy: backlog.DropOldest, // or Refuse, with Room
//		Topic:      func(kind byte, key string) string { return prefix + key + suffix[kind] },
//	})                                                           // replays the journal
//	b.Start(ctx, pub)      // publishes in order until ctx ends; the compactor too
//	err = b.Add('A', "2042253", payload) // Durable: returns once journalled
//	if b.Room(n, size) { err = b.AddAll('A', "", payloads) } // Refuse: ask first
//	cancel(); b.Wait(); err = b.Close()  // Close writes what write-behind still holds
//
// A Drainer publishes any Source (Take a batch from the head, Live, Accepted) the same
// way:
//
//	d := &backlog.Drainer{Pub: pub, Source: src, Ready: ready, Batch: 256,
//		Gather: backlog.Gathering{Wait: 10 * time.Millisecond, Settled: nothingLeft}}
//	go d.Run(ctx)
//
// # Record format (version 1)
//
// Each record is one journal record (agent/journal frames and checksums it):
//
//	version  byte     1
//	kind     byte     an entry's Kind.Code, or 'R' (reported) or 'S' (seen)
//	id       uvarint  > 0; entries are numbered 1, 2, 3, … in the order they were added
//	then, for an entry's kind:
//	  key      uvarint length (1..MaxKeyLen), key bytes   only in a keyed backlog
//	  payload  the rest, at least one byte                the message as published
//	reported  nothing more: every entry with an id <= id was accepted upstream
//	seen      nothing more: every id below id was issued; written last in a snapshot
//
// A key is a topic level: no '/', '+', '#' or NUL (KeyOK). The deadletter log
// (data_dir/deadletter) is an unkeyed backlog of kind 'A'; the forward log
// (data_dir/forward) a keyed one of kinds 'A' (acks) and 'H' (heartbeats). The format
// is the one earlier releases wrote to both, so their journals replay unchanged
// (testdata/*-v1 holds such journals). A deadletter log may hold seen records, which
// releases older than this package refuse: a downgrade needs an empty deadletter backlog.
//
// A snapshot holds the live entries' records and a seen record. Replay reads records in
// order and applies them as the live process did: an entry is admitted under the same
// rules (coalescing, the bound's drops), so coalesced and dropped entries need no record
// of their own; a reported record removes the entries up to its id; an entry whose id is
// below the next id already issued is a copy (appended between a snapshot's checkpoint
// and its capture) and is skipped.
//
// # Invariants
//
//   - Order: entries are published in id order, the order Add admitted them. A round
//     publishes a batch with publish.InOrder and marks only the prefix the publisher
//     accepted (and, for a publisher that stores after accepting, publish.SyncSince
//     confirmed) as reported; the rest is sent again from its first message.
//   - At least once: an entry leaves the backlog only once accepted upstream. The
//     reported record is lazy: a crash may lose it, and the entries it covered are then
//     sent again after the restart.
//   - Durable: Add returns once the entries' records are in the journal under its sync
//     policy (journal.Wait): an entry Add returned nil for survives a crash.
//   - WriteBehind(delay): Add never waits. An entry's record is appended once it has waited
//     delay without being accepted (a timer that runs only while such entries wait; Close
//     appends the rest). An entry accepted sooner costs the journal nothing: no add record,
//     no reported record, no fsync, no compaction. A crash (or a SIGKILL) loses the
//     entries added in the last delay and not yet accepted, and what the journal's own
//     lazy write-out had not written; what was written replays as a prefix of what was
//     added, in order, with no gap. A reported record is appended only when the journal
//     holds an add record it does not cover yet.
//   - Coalescing: an entry of a Coalesce kind replaces the live entry of the same kind and
//     key, which is then not sent (even if its turn came while a publish waited: Live is
//     asked just before it is published). After an outage each key's latest entry goes up.
//   - Bounds: MaxCount live entries and MaxBytes of their keys and payloads. DropOldest
//     drops the oldest live Droppable entry until a new one fits, and refuses the new one
//     (ErrFull) only when none is left; Refuse leaves admission to the caller's Room,
//     asked before the caller commits (Add does not refuse then: concurrent callers that
//     each found room may go past the bound by what they add together).
//   - Compaction: a snapshot replaces the journal when CompactAfter of its records are dead,
//     or when its files hold more dead bytes than both SegmentSize and the live entries
//     (so large entries cannot pile up under the count). It runs on the publishing goroutine
//     after the round whose reported record made it due, or on the compactor goroutine
//     when written records made it due. Its checkpoint is taken without the backlog's
//     lock, so Add never waits for it. The journal's files stay within the
//     live bytes plus max(SegmentSize, live) dead bytes plus the record that crossed it,
//     plus the open segment's reserved blocks and, while a snapshot is written, the
//     snapshot.
//   - The Drainer backs off after a failed round from 100 ms doubling to 30 s, and goes
//     back to 100 ms after a round that made progress. Gathering delays a message by at
//     most Gathering.Wait; an idle Drainer has no timer armed.
//
// # Caveats
//
//   - After the journal refuses an append (a full disk), a write-behind backlog refuses
//     every Add (counted as Dropped "journal") until a restart; what it held stays in
//     memory and is still published. A durable backlog returns the journal's error.
//   - Entries live in memory too (the whole backlog, up to its bound): the bound is the
//     memory a long outage may take.
//   - Observe is a hook for instrumentation and tests; it runs on the backlog's
//     goroutines and must not block.
//   - The topic cache (per kind and key) is bounded at 4096 entries and cleared when full.
package backlog
