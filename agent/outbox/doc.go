// Package outbox is the agent's local message table: a durable queue of commands for
// face-recognition terminals that keeps exactly one command in flight per terminal, sends
// the next one the moment the terminal acks, retries what is not acked, and keeps every
// result until the upstream broker has accepted it.
//
// It grows from the "local message table" field report (a .NET worker after eBay's pattern;
// docs/design.md "The field report"), whose table lived in memory, never matched acks and
// polled every 500 ms. Here the table is a journal (package agent/journal) replayed at
// start, acks are matched by message id, and dispatch is driven by events: an ack, a
// heartbeat, an enqueue, or the one timer armed for the earliest deadline. An idle outbox
// arms no timer at all.
//
// # Tutorial: what the agent calls
//
//	ob, err := outbox.Open(filepath.Join(dataDir, "outbox"), sender, &outbox.Options{
//		Settings: outbox.Settings{RetryInterval: 2 * time.Second, MaxTries: 5, HeartbeatTimeout: 30 * time.Second},
//		Devices:  map[string]outbox.DeviceConfig{"2042253": {}, "serial-1": {NoHeartbeat: true}},
//	})
//	defer ob.Close()
//
// sender implements Sender: Send(ctx, deviceID, Command) publishes the command (the agent
// wraps device.Link.Send, building a face.Command from Command.MessageID, Op and Payload).
// A Sender that also implements NonBlockingSender (the agent's, for terminals on the
// embedded broker) is called for those devices on the goroutine that decided the send —
// the one that called Ack — right after the outbox's lock is released: an ack is followed
// by the next command with no goroutine and no hand-off. Other sends get a goroutine each.
//
// Intake (the upstream task, before its PUBACK):
//
//	err := ob.Enqueue(outbox.Task{MessageID: id, TaskID: t.TaskID, DeviceID: t.DeviceID,
//		Op: t.Op, PersonID: t.Person.ID, Payload: personJSON})
//	// nil or errors.Is(err, outbox.ErrDuplicate): durable, acknowledge upstream.
//	// ErrDeviceFull, ErrFull, ErrInvalidTask: refuse (deadletter with err.Error() as reason).
//	// ErrJournal: the disk failed (full?); refuse, alert, reopen once fixed.
//
// Device events (from device.Link.Events()):
//
//	ob.AckMessage(ev.DeviceID, ev.Ack)                                // Event Ack (Ack takes its id, code and message)
//	ob.Heartbeat(ev.DeviceID)                                         // Event Heartbeat
//	ob.LinkUp(ev.DeviceID) / ob.LinkDown(ev.DeviceID)                 // Events Up / Down
//
// Results (one goroutine):
//
//	for {
//		select {
//		case <-ob.ResultsReady():
//		case <-ctx.Done(): return
//		}
//		for {
//			res, err := ob.Results(100) // oldest first, durable
//			if err != nil || len(res) == 0 { break }
//			...publish each to faceagent/{gw}/results with QoS 1, wait for the PUBACKs...
//			ob.MarkReported(ids...)      // journalled; unmarked results come back after a restart
//		}
//	}
//
// Queries (a command whose ack carries an answer: a ListPersons page), one at a time:
//
//	err := ob.Query(outbox.Query{MessageID: id, DeviceID: dev, Op: "ListPersons", Payload: cmdMsgp,
//		Done: func(ack face.Ack, err error) { ... ack.Persons, ack.Next; or ErrRefused, ErrNoAnswer, ErrClosed ... }})
//
// Terminals' heartbeats whole (protocol version, serial, persons) for the face step:
//
//	ob.TerminalHeartbeat(ev.DeviceID, ev.Heartbeat)                  // instead of Heartbeat
//
// Remote control and config: Pause, Resume, RetryFailed, PurgeFailed, SetSettings,
// SetDevice; metrics and tools: Status, DeviceStatus, Stats.
//
// # Delivery semantics
//
// At-least-once. Enqueue returns nil only when the task is in the journal. After a crash,
// a command that was in flight is sent again with the same message id, and its tries are
// kept (all but a try made in the last moments before the crash: see Caveats); terminals
// must treat a repeated message id as a duplicate and ack it again. An ack that arrives
// after its timeout still completes the command; a second ack is ignored. Results returns
// a result only once the record that finished the command is on disk, so the outcome
// reported for a message id never changes across a crash; the same result may be reported
// twice (MarkReported is not waited for), never lost: a back office dedupes results by
// message id.
//
// Per device: FIFO by intake order (commands without a result, below, yield to tasks),
// one command in flight, the next sent when the ack arrives. The ack timeout is Settings.RetryInterval; a command not acked in time is sent
// again after RetryInterval·2^(tries-1) (capped at MaxBackoff, with jitter), and after
// MaxTries sends it is Failed. Each Send gets a context that expires with the ack timeout,
// so a transport that blocks (a wedged serial line) costs one try, not the device. A
// non-zero ack code fails it at once. Failed commands are reported, kept until
// FailedRetention after they failed (RetryFailed brings them back), then purged; a command
// retried and failed again counts from its new failure. A device is
// online for HeartbeatTimeout after a heartbeat or an ack; an offline
// device gets nothing, and a command in flight when it goes silent returns to the head of
// its queue without spending the try. BreakerThreshold unacked tries in a row open the
// device's breaker for BreakerCooldown (doubling up to 16x); other devices never wait for it.
// A device's DeviceConfig may override RetryInterval, MaxTries and HeartbeatTimeout (the
// config's per-device retry_interval, max_tries, heartbeat_timeout); SetDevice changes them
// live, from the next decision on (a command in flight keeps its ack deadline).
//
// Coalescing: when a task arrives for a person who already has a command on the same
// device that was never sent, the older one is Superseded (whitelist commands are
// idempotent; the last one wins). The command in flight is never touched, nor one that was
// sent and waits for its retry (its ack may still come); the later command follows it. A
// command sent before a restart counts as sent; one sent to a device that then went
// offline has its try refunded and counts as never sent once it holds no tries.
//
// Queries: a Query is delivered like a task's command — it takes the device's one
// in-flight slot, waits while the device is offline, paused or its breaker open, is sent
// again with the same message id after the ack timeout and a backoff, and fails after
// MaxTries — but it is never journalled, never coalesced with tasks (it has no person) and
// has no result: its ack goes to its Done, whole (AckMessage), with ErrRefused for a
// non-zero code. It waits behind its device's tasks, those taken in while it waits
// included: a terminal's whitelist sync yields to new tasks, and it starts only once the
// terminal's queue is empty anyway. Once sent it keeps its turn, as a task waiting for its
// retry does: the terminal may still answer the earlier send, and a task sent meanwhile
// would be a second command in flight. A query counts toward MaxQueuedPerDevice and
// MaxQueued; DeviceStatus.Queries counts them apart from the tasks' Queued and InFlight.
// Close answers every pending query with ErrClosed.
//
// Commands without a result (Task.NoResult: a whitelist sync's corrective commands, which
// the back office never sent and the sync reports itself) are delivered like the others,
// except that one never sent lets every task with a result go before it, whenever that
// task was taken in: the sync keeps a few corrections queued so that the next goes out
// straight from an ack, and a back office task still waits behind the command in flight
// only. One that was sent keeps its turn (its ack may still come). They leave the table as
// soon as they finish, whatever their outcome: Results never
// returns them and RetryFailed never brings them back. In coalescing, such a command never
// supersedes an unsent one that reports a result (the back office would get "superseded"
// by a message id it never sent): both are sent, in intake order. A later command of
// either kind supersedes it, and that supersede is reported to nobody but its asker:
// Options.NoResultDone, when set, gets every such command's outcome (the ack, or why none
// came) once, in memory only — after a restart its asker starts over — and
// DeviceStatus.NoResult counts the unfinished ones, so that a caller tells the back
// office's tasks pending from its own corrections.
//
// Options.Acked, when set, is told of each command with a result that an ack finished
// (succeeded, or failed on a refusal), with its payload: the desired whitelists follow what
// a terminal refused. In memory only, like NoResultDone.
//
// RetryFailed retries only a failed command that is still the latest intent for its person
// on its device: once a later command for that person on that device was taken in, the
// failed one is outdated, whatever became of the later one (queued, in flight, succeeded,
// failed, superseded, expired, reported and gone). Retrying an AddPerson after a later
// DeletePerson went through would put the person back on the whitelist. An outdated failure
// stays Failed — its result was reported once and a message id's outcome never changes, so
// it is not reported again as Superseded — and is purged after FailedRetention. The mark is
// kept in the table and in snapshots, so it survives restarts after the later command left.
//
// Dedupe: a message id already in the table, being stored, or among the last 8192 that left
// it is refused with ErrDuplicate.
//
// # Faces (protocol v2)
//
// With Options.Faces set, a command whose person carries a face (AddPerson, or any person
// of an AddPersons) that its v2 terminal is not known to hold is preceded by that face:
// pump's pre-send step (faces.go) sends PutFace chunks through the device's one in-flight
// slot, each a command of its own (not journalled, like a Query, and counted in
// DeviceStatus.Queries), each from the have of the ack before, so a cut transfer resumes
// and a chunk sent twice does no harm. The command itself goes once every face it needs
// is held; nothing of the device is sent meanwhile, and never a chunk while a command that
// needs the face is in flight. Chunks are DeviceConfig.FaceChunk bytes (the agent: [faces]
// chunk_serial, 4 KiB, at most what one serial frame carries; chunk_mqtt, 64 KiB).
//
//   - A chunk of at most 4 KiB not acked in time is sent again, same message id and bytes,
//     like any command; a larger one (an MQTT chunk) is replaced by a probe under a new
//     message id, which learns the terminal's have: a transfer cut part way through a
//     64 KiB chunk costs the part the terminal lost and a probe, not the chunk again. (A
//     resend of a chunk the terminal got in part is ignored by it, offset past its have, and
//     only its ack tells the have; below 4 KiB that costs less than the probe's round
//     trip.) The probe keeps the chunk's tries, and a probe answered without progress
//     counts as a chunk acked without progress (below). After MaxTries the command the
//     chunk was for fails with a reason naming the face. A chunk in
//     flight when the device goes offline is dropped instead (it counts as never sent); once
//     the device is back the transfer goes on with a probe (an empty chunk) that learns the
//     terminal's have, so an outage costs the part of the chunk the terminal lost, not a
//     resend.
//   - Code 22: the face is sent again from 0, once; a second 22 fails the command ("face
//     <first 16 hex digits>: failed the terminal's hash check 2 times"). Code 23 to a chunk
//     or a command fails it with reason "capacity". Another refusal of a chunk fails the
//     command, naming the face. A face the gateway does not hold fails the command at once.
//     A terminal that acks chunks without taking their bytes (have does not grow) three
//     times in a row fails the command.
//   - Code 21 to a command (the terminal lacks a face the agent thought it held): the faces
//     the command needs are forgotten, and the command goes back to the head of its queue
//     without spending the try; its faces go, then the command again under a new message id,
//     "<id>~f<n>" (the terminal answered its own id already, and answers a repeat the same;
//     a digest of the id when that would pass the protocol's 128 bytes). Its result keeps
//     its own id. After 3 such rounds it fails ("still missing on the terminal"). An ack of
//     an id the command no longer goes by is ignored.
//   - What a terminal holds, as far as the agent knows, is learned from PutFace acks
//     (have = size) and forgotten on a 21 for that face, and all of it when
//     TerminalHeartbeat shows a replacement (the serial changed) or a factory reset (persons
//     down to 0 from more): up to 4,096 faces per device, by the first 8 bytes of their
//     SHA-256, in memory only. That is sound because every error it can make is repaired by
//     the protocol: a face wrongly thought held (a collision, a reset between heartbeats, a
//     flash that lost it) is answered 21, which sends it; a face forgotten (a restart, the
//     bound, a reset seen wrongly) costs one chunk that the terminal answers with have =
//     size. Journalling it would buy neither correctness nor much: a restart costs one
//     chunk per face.
//   - A terminal's protocol comes from TerminalHeartbeat (or a 21: only v2 terminals
//     answer it); a v1 terminal, or one never heard from, gets no face step.
//   - The face step needs the payloads to be face.Command in msgp (as the agent stores
//     them) and a Sender that sends each command under Command.MessageID. It is separable:
//     pump calls faceFirst before a task's send, ack calls faceMissing on a 21, and the
//     query paths route chunks' acks, timeouts and requeues to faces.go.
//
// # Batches (protocol v2)
//
// A terminal whose heartbeat (TerminalHeartbeat) says protocol 2 and a batch size above 1
// gets the AddPerson tasks at the head of its queue in one AddPersons command (batch.go):
// the head and the tasks right behind it, in queue order, as long as each is an AddPerson
// (the task's op and its payload's, a face.Command in msgp), due, not expired, and for a
// person not yet in the batch; at most the smaller of the terminal's batch size and
// Settings.MaxBatch (the agent's [dispatch] max_batch; 1 turns batches off), and no more
// than fit DeviceConfig.MaxCommandBytes once encoded (a serial frame; Msgsize bounds the
// size from above, and an encoding is checked only once that bound passes it). Any other
// op ends the batch: nothing is reordered around a DeletePerson. The head is the command
// the device sends next: a task that commands without a result never sent let go first
// gathers the tasks behind it, not those commands, which follow in their order. A head
// that would go alone goes as before, under its own id. Without a batch size (v1, or 0 or 1) nothing
// changes.
//
//   - One command in flight holds for a batch: its tasks are InFlight together (one send
//     record each, one ack deadline), DeviceStatus.InFlightTasks counts them, and
//     InFlight names the first.
//   - The face step goes first, for every face the batch's persons need, each once, each
//     chunk for the task that needs it: a face that cannot be sent fails that task alone,
//     and the batch is gathered again without it.
//   - The ack's results go each to its task, by person id: 0 succeeds it; 21 forgets its
//     face and puts it back in the queue without spending the try (its face goes again,
//     then the task; after 3 such rounds it fails); 23 fails it with "capacity"; another
//     code fails it as a refusal; a person the ack has no result for is a failed try of
//     its task. A command without a result (Task.NoResult) reports its own outcome to
//     NoResultDone under its own message id, with its person's code.
//   - An ack timeout, a failed Send, or an ack whose own code is not 0 (the batch was not
//     processed) is a failed try for every task of the batch, all retried after one
//     backoff, each failing once it reaches MaxTries; a device gone offline refunds the
//     try of each. After an ack with a non-zero code the terminal gets single commands
//     until its next heartbeat announces a batch size again.
//   - Message id: "B" and 16 URL-safe base64 characters (96 bits) of a SHA-256 over the
//     batch's tasks' message ids (and a salt per task, below). The same tasks make the same id, so nothing about a
//     batch is journalled: its retry (the batch kept in memory, sent again while its tasks
//     still wait at the head of the queue) and its resend after a restart (gathered again
//     from the queue: the tasks that were in flight come back first, in order) carry the
//     same id and the same bytes when they carry the same tasks, and a terminal that
//     applied it answers from its memory. When the gathering differs (more tasks queued
//     meanwhile, a batch size changed), the id differs too, and the terminal applies the
//     persons it got before once more: AddPerson is idempotent, and nothing queued after
//     them was sent before them. A task's salt changes after a 21 for it and after its
//     batch is refused as a whole, so that the terminal, which answers a repeated id from
//     its memory, is asked anew. Salts live in memory: after a restart a batch that got a
//     21 just before the crash may be answered from the terminal's memory once more,
//     which costs a round (another 21), not a task.
//   - A late ack of the batch (after its timeout, while its tasks wait for their retry)
//     still answers it; a second ack, or one of a batch gathered differently since, is
//     ignored.
//
// # On-disk format
//
// The journal (see package journal for framing) holds one msgp map per record, with short
// keys (record.go): v (format version, 1), k (kind), id, ids, t (task), d (device), op, p
// (person), b (payload), o (intake order), at, ad (added), ex (expires), nx (next attempt or
// ack deadline), dn (done), n (tries), s (status), e (error), r (reported), pa (paused), od
// (outdated: a later command for the same person on the device was taken in; snapshots only,
// added within format 1: a release before it ignores it, and replay derives it for what an
// older snapshot holds), nr (no result: Task.NoResult, in add and item records; added
// within format 1: a release before it reports such a command's result).
// Kinds: 1 add, 2 send, 3 retry, 4 requeue, 5 finish, 6 reported, 7 purge, 8 reset, 9 pause,
// 10 resume; snapshots use 11 item (a message's whole state), 12 device, 13 recent ids.
// Decoders skip keys they do not know, so a later release reads these files; kinds and
// status numbers are never reused. testdata/journal-v1 is a directory written by the release
// that introduced format 1 (a snapshot and a segment holding every state that survives a
// restart); TestJournalFixture replays it and checks the exact table. It is never
// regenerated: a release that changes the format adds journal-v2 beside it.
//
// Beside the journal, payloads.cache holds the payloads of the messages in the table (a
// CRC-32C and the payload, one after another), so that they are not on the heap: an item
// keeps the offset and length, and the payload is read (pread) when the command is sent.
// It is a cache of what the journal holds: never fsynced, recreated by the replay at Open,
// removed by Close, rewritten without its dead bytes once they outnumber the live ones and
// 1 MiB (spill.go says why this and not segments); a record that fails its checksum is read
// again from the journal (Caveats).
//
// # Invariants
//
//   - The table is changed only by applying records, live and in replay alike: replaying the
//     journal reproduces the table (the property test checks it at every restart).
//   - At most one command per device is in flight: a task's (InFlight), a batch's (its
//     tasks InFlight together) or a query's.
//   - A task accepted by Enqueue stays in the table until its result was marked reported
//     (a NoResult one: until it finished).
//   - Unfinished commands never exceed MaxQueued, nor MaxQueuedPerDevice on one device;
//     intake also stops while MaxQueued results wait to be reported. Reported failures held
//     for RetryFailed are bounded by FailedRetention only.
//   - At most one timer is armed; none when nothing waits for a deadline.
//   - Of one person's commands on a device that can still be sent or retried (Scheduled,
//     InFlight, Failed), all but the latest taken in are outdated.
//
// # Caveats
//
//   - Sends, retries, requeues, finishes, reports and retention purges are journalled lazily
//     (journal.AppendLazy): they are fsynced with the next fsync somebody waits for (an
//     Enqueue, Results, a control command), or within the journal's LazyDelay (50 ms), so
//     that an ack is followed by the next send without waiting for the disk and a stream
//     of acks costs a few fsyncs a second (an fsync after every ack would bound dispatch by
//     the disk: docs/benchmarks.md).
//     Process kill: the outbox calls its journal's WriteOut (one write, no fsync) before
//     it hands a command to the Sender, so the command's send record and the finish of
//     the command acked before it are in the file first, and a killed process (SIGKILL, a panic, the
//     OOM killer) keeps what was written. After a kill, each device is sent again at most
//     the one command it was sent last: the command in flight (its ack, if one came, was
//     not yet written). No command acked before it is sent again. Lazy records that no
//     send wrote out since (a MarkReported, a retention purge, the last finish of a device
//     with nothing more to send) are lost as in a power cut.
//     Power cut (or kernel crash, or a Sender that does not write out): the lazy records of
//     the last LazyDelay are lost, and only these things can repeat: a send then is not
//     counted, so the command is sent again with the tries it had before (a command whose
//     every send brings the machine down within LazyDelay is therefore resent at each
//     start and never reaches MaxTries); an ack then is forgotten, so the command is sent
//     again and the terminal acks the duplicate (its result was not offered yet: Results
//     waits for the finish record); a MarkReported then is forgotten, so the same result
//     is offered again; a coalescing then is forgotten, so the superseded command is sent
//     after all, ahead of the one that superseded it; a retention purge then is forgotten
//     and done again. No accepted task is lost, and intake and control commands are always
//     waited for.
//   - After the journal fails (disk full, I/O error) the outbox stops dispatching and refuses
//     intake with ErrJournal; Err reports it. Close and Open again once the cause is fixed:
//     the table is rebuilt from what is on disk.
//   - Compaction starts once the dead records outnumber the live ones and either
//     Options.CompactAfter of them are dead (50,000) or Options.CompactBytes were appended
//     since the last snapshot and more than it (16 MiB): the journal's files stay within
//     twice the live state plus that, and the open segment's reserved blocks
//     (journal.Options.SegmentSize, 64 MiB by default) come on top. It holds the table
//     lock while the journal seals its segment (one fsync) and the live state is copied;
//     the snapshot is written without it.
//   - Queries are not journalled, because nothing a crash does to one breaks an invariant:
//     a query holds no task and no result, so none is lost; an ack for a query the crash
//     forgot is ignored like any unknown message id; its asker, gone with the process, asks
//     again. After a restart a device is offline until heard from, so its next command
//     follows the terminal's next heartbeat, by then done with the forgotten query; only a
//     device without heartbeats (NoHeartbeat) may get its next command while the terminal
//     still answers a query sent just before the crash. A query pending when the journal
//     fails waits, like the tasks, until Close.
//   - Online state, breakers and counters are not journalled: after a restart every device
//     is offline until heard from.
//   - Message ids, task ids and person ids are limited to 65535 bytes each (ErrInvalidTask),
//     and MaxTries to 65535: the table keeps their lengths and the tries in 16 bits, which
//     keeps a queued command's item at 64 bytes.
//   - Command.Payload is shared with the outbox, which keeps it for the command's retries:
//     a Sender must not modify it.
//   - The ids in a Command, a Result (MessageID, TaskID) and DeviceStatus.InFlight share
//     memory with the table: its ids are kept one after another in chunks of 8 KiB
//     (blobs.go), and one such string held keeps its whole chunk. Keep a copy
//     (strings.Clone) of one held for long. Result.Err is a copy already. The chunks are
//     compacted under the outbox's lock once a quarter of their bytes are dead: a copy of
//     the live ids, once for every quarter of the table that finished
//     (BenchmarkBlobCompaction).
//   - Payloads live in payloads.cache (On-disk format): a send reads its payload from there
//     (from the page cache), under the outbox's lock, as is the rewrite that reclaims its
//     dead bytes (BenchmarkSpillRewrite: a copy of the live payloads, a pause for every
//     device; it comes about once for every as many that left). If the file cannot be
//     written (disk full, I/O error), payloads stay on the heap, as Stats.PayloadsOnHeap
//     shows; they stay there until the file's next rewrite takes them back, their message
//     leaves the table, or the outbox is reopened. The disk holds up to twice the live
//     payloads plus 1 MiB more than the journal alone, and each payload is written once
//     more (twice when a rewrite copies it), unsynced: the page cache may drop a
//     short-lived one before it reaches the medium. On a data_dir in tmpfs the file is RAM
//     again, outside the process's RSS.
//   - A payload that cannot be read from payloads.cache (its checksum fails, the file was
//     truncated, an I/O error) is read again from the journal while the outbox runs
//     (repair.go): the read that failed (a send's or a snapshot's) asks for it, and one
//     goroutine checks every live record of the file, then reads the journal once for all
//     the damaged ones (journal.ReadRecords: every segment and the snapshot, through a
//     64 KiB window, without the outbox's lock; a compaction waits meanwhile). The command
//     is sent as soon as that is done, and a snapshot that failed on it is tried again at
//     once. A round reads the whole journal, so it grows with the journal's size
//     (BenchmarkPayloadRepair, docs/benchmarks.md); the outbox's lock is held for the last
//     step only: putting
//     the payloads back, and the file's rewrite when one is due (BenchmarkSpillRewrite).
//     Stats.PayloadReadErrors counts the failed reads, PayloadRepairs the payloads read
//     again; these stay on the heap (PayloadsOnHeap) until the file's next rewrite takes
//     them back, due at once when much was damaged. A damaged journal is not a cache: if
//     the command's journal record is damaged too, the command is neither sent nor
//     dropped. An error names its task, Stats.PayloadRepairFailures counts it, and it
//     stays queued: once its turn comes its device sends nothing else (it reads again
//     after 1 s doubling up to 1 min, without reading the journal again). Every snapshot
//     fails meanwhile (the journal grows), and the next Open meets the damaged record
//     and applies the journal's rules: a
//     journal.CorruptError; with Options.Journal.SkipCorrupt the record is skipped (listed
//     in Recovery) and its command is gone; and damage in the last record of the newest
//     segment is taken for a torn tail and cut, with a warning (the journal cannot tell
//     the two apart). A journal that cannot be read (an I/O error) leaves the command
//     waiting for its next failed read to ask again.
//   - With a NonBlockingSender, the call that decides a send pays for it before it
//     returns: an EnqueueBatch that finds 64 idle devices publishes 64 commands first (with
//     the embedded broker, before the back office gets its PUBACK), and an Ack publishes the
//     device's next command. Those sends only queue (microseconds each); a Sender that
//     claims SendsWithoutBlocking and then blocks holds up its caller.
//   - Task.ExpiresAt is checked when the command's turn comes: a command queued for an
//     offline device expires (and is reported) once the device is back, not at the instant.
//   - Intake order is the order records were journalled; concurrent Enqueues apply them as
//     their fsyncs return. If a later command for a person was sent, acked and reported
//     while an earlier one still waited for its fsync, the earlier one is then sent after it
//     and, should it fail, is not known to be outdated (live; a replay knows).
//   - Dedupe remembers the last 8192 ids that left the table; a redelivery older than that
//     is stored again (whitelist commands are idempotent).
package outbox
