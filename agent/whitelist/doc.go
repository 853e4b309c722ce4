// Package whitelist keeps the desired whitelist of every terminal: for each terminal, the
// persons it should hold, each with its record (name, validity, face hash) and the
// record's rev (face.RecordRev), and the desired digest (face.Digest) computed as the
// terminal computes its own. A reconciliation compares a terminal's heartbeat digest
// with Digest, and, when they differ, the terminal's ListPersons pages with the desired
// list (Diff). The store is durable like tasks: it survives SIGKILL and power loss once
// Flush returned.
//
// # Tutorial
//
//	s, err := whitelist.Open(dir, whitelist.Options{Journal: journal.Options{Sync: journal.SyncAlways}})
//	defer s.Close()
//	err = s.Set("2042253", sync.Record{ID: "951", Name: "Li Lei", ValidTo: "2027-01-01T00:00:00Z"})
//	err = s.Delete("2042253", "952")
//	counts, err := s.Replace("2042253", list)    // the whole list: Added, Deleted, Unchanged
//	// A SetWhitelist task: the list and the task (its counts) in one journal record; a
//	// redelivery is ErrDuplicateTask. Its result, durable, then offered until reported.
//	counts, err = s.ReplaceTask("2042253", list, whitelist.SetTask{MessageID: id, TaskID: "t-9"})
//	ok, err := s.FinishSet("2042253", id, whitelist.SetSucceeded, 1, "")
//	res := s.SetResults(100); err = s.MarkSetReported(id) // <-s.SetResultsReady()
//	// Updates apply at once, in the order they are called; Flush waits until every update
//	// before it is durable: acknowledge the task message after Flush returned nil.
//	err = s.Flush()
//	// The terminal refused a person's latest record: it leaves the desired list (only if
//	// rev is still the desired record's) until a Set or Replace names the person again.
//	ok, err := s.Exclude("2042253", "951", rev)
//	ok, err = s.Include("2042253", "951", rev)    // it took that record after all
//	// Reads for reconciliation.
//	s.Digest("2042253"); s.Count("2042253"); s.Known("2042253")
//	// The hardware serial a terminal reported last, kept across restarts (a replacement
//	// while the agent was stopped shows as a changed serial); independent of the lists.
//	err = s.SetSerial("2042253", "FS-2042253-1"); serial := s.Serial("2042253")
//	page := s.Page("2042253", after, 100, nil)     // desired entries with id > after
//	inUse, err := s.Faces()                        // every face a record refers to, durable
//	d := s.Diff("2042253")
//	err = d.Page(held, next, func(c sync.Change) { ... }) // per ListPersons page
//
// # Reconciliation
//
// A Reconciler keeps each terminal holding its desired list. It is a state machine per
// terminal fed by events, and decides; the root carries its decisions out through small
// interfaces declared here (Lister and Corrector over the terminal's one-at-a-time queue,
// Reporter for sync reports, Clock for time and timers):
//
//	r, err := whitelist.NewReconciler(whitelist.ReconcileOptions{Store: s, Lister: l, Corrector: c,
//		Reporter: rep, MaxReconciling: 4, ListLimit: func(dev string) int { return face.ListLimitFor(frame) }})
//	r.Heartbeat(dev, hb)                      // every heartbeat, v1 or v2
//	r.TasksPending(dev, true)                 // the queue holds tasks (not counting r's own commands)
//	r.ListReply(dev, msgID, ack, err)         // the reply to a ListPersons r sent (err: none came)
//	r.CorrectionDone(dev, msgID, ack, err)    // the outcome of a corrective command r sent
//	r.DesiredChanged(dev); r.SetWhitelist(dev); r.Resync(dev); r.Forget(dev)
//	st := r.Status(dev)                       // in sync, reconciling, last status, backoff
//
// Drift is a changed serial (at once; the serial a terminal reported last is kept in the
// store, so a replacement while the agent was stopped counts), or, once the terminal's queue has held no task for
// two heartbeats, a v2 digest other than the desired one or a v1 count below the desired
// one. A reconciliation then reports started; for v2 it reads ListPersons pages (limit
// ListLimit), compares each with the desired list (Diff) and sends each page's corrective
// commands (DeletePerson for an extra person, AddPerson for a missing or changed one)
// before asking for the next page; for v1 it sends every desired person again. Up to
// Window corrections wait queued at once (topped up once half are answered), so the queue
// sends the next straight from the ack of the one before and a repair goes at the
// terminal's pace. It reports
// done, or failed with the error, and counts missing, extra and changed persons. A report
// names the first reason of setWhitelist, serial, digest, count.
//
// Invariants:
//
//   - A terminal in sync gets nothing: its heartbeat's digest is the whole check.
//   - At most Window of a terminal's reconciliation commands await their reply (a
//     ListPersons alone), and none is queued while the terminal's queue holds tasks; the
//     queue sends tasks before the corrections it holds that were never sent (a Corrector's
//     contract), so a task waits behind at most the command in flight. A paused
//     reconciliation gives up its place among MaxReconciling and resumes where it stopped.
//     A reconciliation that failed with commands still queued leaves them to be sent; the
//     next begins once they are answered (or StepTimeout after it failed: presumed lost).
//   - Each command has a new messageId (a terminal acks a repeated one without applying it).
//   - Each correction is judged against the desired list as it is when it is queued: a
//     correction a task made unnecessary is not queued, and one a task for its person
//     follows while it waits unsent is superseded by it (the queue's coalescing). Of a
//     change without a task (a SetWhitelist, a refusal's exclusion) at most Window
//     corrections queued before it go out; the digest check after the repair catches them
//     (a SetWhitelist starts a reconciliation of its own).
//   - Only a terminal with a desired list (Known: a task named it) is judged or
//     reconciled, even on a Resync: with none there is nothing to compare with, and what
//     it holds stays. On a terminal with one, every extra person is deleted, whether the
//     agent sent it (a delete the terminal refused or missed) or it was added by hand.
//   - SetWhitelist tasks (ReplaceTask) get their result here: on a v2 terminal, succeeded
//     at the first judged heartbeat in step after the task's own reconciliation; on a v1
//     terminal, the reconciliation sends DeletePerson for each person the pending tasks
//     removed and AddPerson for each one they set (SetWork) and succeeds when it ends done;
//     failed once MaxSetFailures reconciliations in a row failed or did not take (then
//     reconciliation goes on for drift). FinishSet runs as an effect.
//   - A refused AddPerson excludes that record (Exclude), so a refusal never becomes a
//     repair loop (the root does the same for a back office AddPerson task the terminal
//     refused, and includes the record again when a task with it succeeds); more than
//     MaxRefusals in one reconciliation, a refused DeletePerson or ListPersons, codes 21
//     to 23, a command without a reply (err, or no reply at all within StepTimeout while
//     commands await theirs) and a malformed page (more than the limit, ids not increasing
//     or not after the previous page, next not the page's last id, a bad rev) fail it.
//   - After a reconciliation failed, or ended done but the next judged heartbeat still
//     differs, the next one waits BackoffBase doubled per such reconciliation in a row, at
//     most BackoffMax, on a timer: a terminal that never comes in step is not a hot loop.
//     A heartbeat in step, a SetWhitelist or a Resync resets the wait.
//   - Effects (commands, reports) are decided under the reconciler's lock and carried out
//     after it is released, in the order decided; an event method called back from
//     List or Correct is safe.
//
// A correction's AddPerson carries the record as the intake's AddPerson does: its rev
// and face (Record.Person); a v1 terminal's carries neither.
//
// Caveats: a v1 terminal cannot list what it holds, so its extra persons are out of reach
// but for those a SetWhitelist removed (SetWork); faces
// (PutFace) are not sent by a reconciliation; a page's corrections are held until sent
// (at most the desired persons between two of the terminal's ids, the whole desired list
// for an empty terminal: about 40 bytes a person).
//
// # Sharing
//
// The terminals of a site hold the same persons, so the store keeps each distinct record
// once (interned by content, found by its rev) and cuts every list into chunks of
// member references that are interned too: a chunk ends after a member whose id's
// seeded hash has its low six bits clear (or at the list's end), so equal lists are cut
// into equal chunks whatever their history, and one change touches one chunk (two when
// it removes a chunk's last member). Sixty-four terminals with the same list share
// every chunk and every record; each terminal costs a slice of chunk pointers. A member
// is a 32-bit record index; its top bit marks a refusal's exclusion. Figures:
// docs/benchmarks.md, "agent/whitelist: desired whitelists" (tools/bench/wlfootprint
// measures a store in processes of its own).
//
// # Invariants
//
//   - Digest(dev) is the XOR of face.Member over the desired list, kept by Toggle on every
//     change (set, change, delete, exclude, include); Count(dev) is the list's length.
//     The property test recomputes both from the list after every step.
//   - The desired list is the terminal's members minus the excluded ones, in bytewise id
//     order (Page). Exclude(dev, id, rev) acts only while rev is the desired record's, so a
//     refusal of an older record never hides a newer one; Set (even of the same record)
//     and Replace listing the person include it again; Delete and Replace not listing it
//     drop it. Exclusions are written to the journal and kept in snapshots.
//   - Updates are journalled and applied under one lock in the order they are called, so
//     replay rebuilds the state the live store had. An update is applied in memory only
//     once its record is queued in the journal; Flush returns nil once every record
//     queued before it is durable.
//   - A Replace larger than one journal record (256 KiB) is written in parts, each durable
//     before the next is queued, and applied at its last part: a crash between parts
//     drops the whole update at replay (it was never flushed).
//   - A record is interned while a chunk refers to it; a chunk while a terminal's list does.
//   - Serials (SetSerial) are journalled and snapshotted like the lists but independent
//     of them: a serial makes no terminal Known, Forget keeps it. At most MaxTerminals
//     terminals have one.
//   - Bounds: MaxTerminals terminals, MaxPersons members per terminal (excluded ones
//     included), MaxRecords distinct records. An update that would pass one is refused with
//     ErrTooManyTerminals, ErrTooManyPersons or ErrTooManyRecords and changes nothing.
//     A Replace needs room for its new records before the records it drops are released.
//
// # Record format (version 1)
//
// Each record is one journal record (agent/journal frames and checksums it). Strings are
// a uvarint length (shortest form) and bytes; a record in full form ("fields") is id
// (1..128 bytes), name, validFrom, validTo (0..512 bytes each), then the face in one of
// three forms, named by its first byte: 0, no face; 1, the 32 raw bytes of its SHA-256
// (a face whose size and kind are not known, and every face of journals written before
// they were kept: such journals replay as they are); 2, the 32 raw bytes, the size
// (uvarint, at most face.MaxFaceSize) and the kind (string, at most 16 bytes), used when
// either is known. The same bytes are the record in memory.
//
//	version byte  1
//	kind    byte  'O' an update; 'P' a part of an update, more follow; 'L' its last part
//	              'N' a terminal's serial
//	              'r' snapshot records; 't' a snapshot terminal; 'n' snapshot serials
//	'O','P','L': flags byte (bit 0: the update replaces the whole list; bit 1: a SetWhitelist
//	             task, only on a whole update's first record), device id string, with bit 1
//	             the task: message id, task id (strings), taken at (uvarint unix ns), added,
//	             deleted, unchanged (uvarints); then operations to the end:
//	  'S' fields             set the person's record
//	  'R' rev [8]byte        set the record the store held before the update, the only one
//	                         with this rev (a Replace of a list the store holds costs 9
//	                         bytes a person)
//	  'D' id                 delete
//	  'X' id, rev [8]byte    exclude, if rev is the desired record's
//	  'I' id, rev [8]byte    include, if rev is the excluded record's
//	  'F'                    forget the terminal (alone in its update)
//	  An update of more than one operation lists them in increasing id order.
//	  An update without operations makes its terminal known (a DeletePerson of a person
//	  not there, on a terminal no task named before).
//	'N': device id string, serial string: the serial the terminal reported last ("": none)
//	'n': (device id string, serial string), repeated: the snapshot's serials
//	'r': fields, repeated: the snapshot's records, numbered 0, 1, … across 'r' records
//	'E': a SetWhitelist result: device id, message id, status byte (1 succeeded, 2 failed,
//	     3 superseded), tries, finished at (uvarint unix ns), error string
//	'A': SetWhitelist results reported: message id strings
//	's': snapshot: a kept SetWhitelist task: device id, the task as in an update, status
//	     byte (0 pending), tries, finished at, error; 'g': a pending task's work: device
//	     id, gone and touched id lists (uvarint count, strings); 'k': reported task ids
//	't': flags byte (bit 0: a Replace set the whole list), device id string, digest uint64
//	     little endian, uvarint member count, then per member in id order the uvarint
//	     (zigzag(number - previous number) << 1 | excluded), previous starting at -1.
//
// A snapshot ('r' records, then 't' records, then 'n' records) is written after a journal checkpoint taken
// under the store's lock, when the records written since the last snapshot exceed both
// Options.CompactBytes and that snapshot's size; the files then stay within about twice
// the snapshot plus CompactBytes, plus the open segment's reserved blocks (SegmentSize).
//
// # Caveats
//
//   - After the journal refuses an append (a full disk), updates return its error and
//     change nothing; a record queued but lost by a failed fsync is in memory but not on
//     disk until a restart replays the journal (Flush returned the error).
//   - Lowering a bound does not drop state: replay applies what was written, and updates
//     are refused until the store is back under it.
//   - A Diff reads the desired list as it is when each page is compared: an update during
//     a diff shows in the pages after it, and the digest check after the repair catches it.
//   - A large Replace waits for the fsync of each of its parts while holding the lock:
//     reads and other updates wait with it.
//   - Chunk cuts depend on a per-process seed: sharing holds within a process, snapshots
//     do not depend on it.
package whitelist
