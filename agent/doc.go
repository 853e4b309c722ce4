// Package agent wires faceagent together: the configuration, the embedded broker and
// state store, the intake of tasks, the outbox (the durable local message table), the
// device links, and the reports upstream. It owns start-up order and shutdown.
//
// # Tutorial
//
//	cfg, err := config.Load("/etc/faceagent/agent.toml", nil)
//	if err != nil { … } // exit 2
//	log, level := agent.NewLogger(cfg.Log, os.Stderr)
//	agent.ApplyMemoryLimit(cfg.Agent)
//	a, err := agent.New(&agent.Options{Config: cfg, Logger: log, LogLevel: level, Version: version})
//	if err != nil { … }
//	go func() { <-a.Ready(); /* sd_notify READY=1 */ }()
//	err = a.Run(ctx) // blocks; cancel ctx for a clean stop
//
// Run starts the parts in order, closes Ready, waits for ctx, then stops the parts in
// reverse within agent.shutdown_timeout.
//
// # HTTP pull source ([intake.http])
//
// The back office API of the field report (docs/design.md "The field report"): pages of
// tasks fetched from url (page=N, size=page_size) until a short page, every interval; each
// page goes through the same intake as an MQTT message. Results are POSTed to results_url
// as JSON arrays, and marked reported only once both MQTT and the POST took them.
//
// # Remote management
//
// agent/remote watches faceagent/{gw}/config, TOML overrides of [dispatch] and devices'
// settings that the agent validates (config.ApplyOverrides) and applies live, or refuses
// with the running config kept, and faceagent/{gw}/control, one remote.ControlCommand
// (pause, resume, retry-failed, purge-failed, drain, undrain) executed once per id — the
// ids done are kept in data_dir/control-done.json. The outcomes are written to
// …/config/status and …/control/status. agent/devstate writes each terminal's state to
// faceagent/{gw}/devices/{id}. Both reach the state store through agent/kv: with the
// embedded broker straight into its store engine (kv.Engine, the owner of those status
// and state keys); with an external store through agent/store (kv.Client), whose
// watches survive reconnects.
//
// # With an external broker ([upstream])
//
// One autopaho connection (persistent session: clean start only on the first connection,
// session expiry from the config) takes the tasks with manual acknowledgement: the PUBACK
// is sent only after the journal append returned, in arrival order; a message that could
// not be stored is not acknowledged and the connection is dropped so the broker delivers
// it again. Results, forwarded acks and heartbeats, and deadletters are published on the
// same connection with QoS 1, pipelined: each of the three streams keeps up to
// upstream.publish_window messages (default 64) in flight, written in order, and marks
// reported only the prefix the broker has acknowledged (PUBACK). One at a time, a stream
// managed one message per round trip — 20/s across a 50 ms link; with 64 in flight about
// 900/s (docs/benchmarks.md). A failure stops the stream at the first unacknowledged
// message and everything from it is sent again, in order: duplicates, never a loss or a
// reordered first copy. MQTT keeps QoS 1 messages of one topic in order on one
// connection; paho's session resends what is in flight after a reconnect when the
// broker kept the session, and when it did not (CONNACK without a session) the stream
// sends it again itself. Device state goes to the upstream state store through
// agent/store. Terminals use the embedded broker when there is one, else the upstream
// broker.
//
// # How a task travels (embedded broker)
//
//  1. The back office publishes on faceagent/{gw}/tasks (QoS 1). The broker hands the
//     message to intake (agent/broker's Intercept, package agent/intake) before it routes
//     or acknowledges it: intake parses it (package agent/wire), stores the good tasks in
//     the outbox's journal (EnqueueBatch returns once they are durable) and only then lets
//     the broker send the PUBACK. Malformed tasks, unknown devices and tasks over a queue
//     bound go to faceagent/{gw}/deadletter and are acknowledged; a journal failure is
//     not acknowledged (MQTT5: PUBACK 0x83; 3.1.1: no PUBACK, disconnect).
//  2. The outbox sends each device's commands one at a time through the device links
//     (one MQTT link through the broker's inline client, one serial link per port).
//  3. Link events go to the outbox (acks, heartbeats, link up/down) and acks and
//     heartbeats are forwarded to faceagent/{gw}/devices/{id}/ack|heartbeat. The MQTT
//     link hands acks over on the goroutine that read them (no channel, no pump): the
//     outbox takes the ack and the device's next command is published before that
//     goroutine returns, which keeps the agent's share of a command cycle to
//     microseconds. Heartbeats, serial links' events and link up/down go through one
//     pump per link (heartbeats: see "Memory").
//  4. The reporter publishes each finished task's result on faceagent/{gw}/results and
//     marks it reported only after that; unreported results are sent again after a
//     restart.
//  5. The state writer keeps faceagent/{gw}/devices/{id} (DeviceState, msgp) current in
//     the embedded store: on change, at most once per store.write_interval per device,
//     rewritten once per heartbeat_timeout, with PX = 3 × heartbeat_timeout so a dead
//     gateway's devices expire. It only ever gets marked dirty by the other parts, and
//     writes on its own goroutine: the store never holds up dispatch. In the embedded
//     store the prefix faceagent/{gw}/devices/ is reserved to the agent (as are
//     faceagent/{gw}/config/status and …/control/status, which it writes too): clients
//     read and watch those keys, and are refused "not authorized" when they write them
//     (so nobody can put a fencing token on them and freeze the agent's writes). A write
//     any store
//     refuses (an -ERR answer) is counted in faceagent_store_write_refused_total{reason},
//     warned about at most once a minute, and named on /healthz (still 200: a restart
//     would not help) until a write of that device succeeds.
//
// Reload applies what can change live from a re-read file ([log] level, [dispatch],
// [store]) and names the sections that need a restart (ErrNeedsRestart).
//
// /metrics (Prometheus text, package agent/metrics) and /healthz are served on
// metrics.listen when it is set, by a server bounded by the [metrics] timeouts and
// max_connections (a connection beyond it is closed as soon as it is accepted). /healthz
// answers 503 with the reason while a part is unsound: the outbox's or the deadletter
// log's journal refused a write, or the embedded broker cannot accept connections (Accept
// failing, e.g. out of file descriptors; it recovers by itself once Accept succeeds). The
// systemd watchdog asks the same (Healthy), so a broker that cannot accept for
// WatchdogSec (30 s) gets the daemon restarted. See docs/security.md.
//
// # Memory
//
// A queued command costs the heap about 170 bytes (its outbox entry and ids); its payload
// waits in the outbox's payload file beside the journal (payloads.cache, read back with
// pread when the command is sent). A connected terminal costs two mochi goroutines (4 KiB
// of stack each once a collection found them parked; its reader 8 KiB after a heartbeat
// and 16 KiB after an ack; our copy of mochi, third_party/mochi, passes packets by
// pointer) and ~5 KB of heap. A reader keeps what it grew to until the collections after
// it, so a terminal's heartbeats (every 5 s) must fit in 8 KiB: the outbox, the forward
// log and the device state take them on the MQTT link's pump, not on the reader (an ack
// may so be handled before a heartbeat sent just before it; both mark the terminal
// online).
// Terminals, recognised by their first SUBSCRIBE, get a 32-message write queue and a
// 512-byte read buffer instead of the broker's defaults. The daemon (agent/cmd/faceagent, internal/memtrim) unmaps the
// start-up-only pages of its binary once ready and returns free heap to the kernel after
// 5 s without a garbage collection (collecting again while that still shrinks goroutine
// stacks), so a burst's memory does not stay resident. /metrics has
// process_resident_memory_bytes, faceagent_go_memory_bytes{class} and the payload file's
// size, errors and repairs. docs/benchmarks.md has the figures (tools/bench/rss.sh).
//
// # Disk
//
// data_dir holds four journals (package journal), each compacting by itself: a snapshot
// of the live records replaces its files once the dead ones call for it, by count or by
// bytes, whatever a client or the upstream broker does. The open segment of each has its
// blocks reserved when it is created (du counts them). Bounds, L being a journal's live
// records in bytes:
//
//   - outbox/: the open segment (64 MiB reserved), the snapshot (L; twice while a new
//     one is written), at most 50,000 dead records (about 12 MB of the agent's tasks) or
//     max(16 MiB, L) bytes appended since the snapshot, whichever comes first, and
//     payloads.cache (up to twice the queued payloads plus 1 MiB), plus what is appended
//     while a snapshot is being written (in the background). L is bounded by
//     dispatch.max_queue_total queued tasks and as many unreported results. 32,000 task
//     cycles stayed under 75 MB (TestTaskCyclesKeepTheOutboxBounded).
//   - forward/ and deadletter/: 4 MiB segments; dead bytes up to max(4 MiB, L) plus what
//     was written since the last check (a deadletter holds the refused message, up to
//     intake.max_message_size), so each stays within 4 MiB reserved + 2×L + max(4 MiB, L) +
//     that, L at most 1 MiB (forward) or 4 MiB (deadletter) of backlog: about 10 and 17
//     MiB (TestForwardLogStaysWithinItsBound, TestDeadLetterLogStaysWithinItsBound).
//   - broker-sessions/ (with [broker] persist): 2×L + max(4 MiB, L) + 4 MiB, about 8 MiB
//     while few messages wait in kept sessions (agent/broker, "Persistence"). A full disk
//     there is reported (/healthz, faceagent_up, faceagent_broker_sessions_journal_writable)
//     but not to the systemd watchdog: the broker refuses what it cannot store and takes
//     writes again by itself once space is back, and a restart would only drop every
//     connection and the state store's keys that are not persistent.
//
// faceagent_journal_file_bytes{journal} has each journal's size.
//
// # Forwarded acks and heartbeats
//
// Every ack and heartbeat a terminal sends is copied to faceagent/{gw}/devices/{id}/ack
// or …/heartbeat as a report (docs/design.md "Reports"): kept in its own journal in
// data_dir/forward from 50 ms after it came until the broker accepted it (write-behind:
// one the broker took within those 50 ms — every one while the upstream keeps up — is
// never written), so the device event path never waits for the disk or the upstream
// broker; published in order with QoS 1 by one goroutine, in rounds that gather
// for 5 ms after the first message (results: up to 10 ms while tasks are unfinished,
// agent/report, agent/backlog); marked reported only
// once the broker accepted it (PUBACK; with the embedded broker: routed without a drop);
// sent again, in order, after a reconnect or a restart. A terminal's heartbeat replaces
// its older one not yet sent, so an outage leaves one heartbeat per terminal to send, the
// latest. /metrics: faceagent_forward_backlog, faceagent_forward_backlog_bytes,
// faceagent_forwarded_total{kind}, faceagent_forward_dropped_total{reason},
// faceagent_forward_heartbeats_coalesced_total.
//
// # Caveats
//
//   - [intake.http] relies on the back office to stop listing a task once its result was
//     POSTed; a task listed again after it finished is executed again (at-least-once).
//   - Deadletters are journalled in data_dir/deadletter (fsynced before the task message
//     is acknowledged) and published in order with QoS 1 until the broker accepts them,
//     after a restart too; a crash between the broker's PUBACK and the lazy "reported"
//     record sends one again. The backlog is bounded (4096 deadletters, 4 MiB): a
//     message whose refused tasks do not fit is not acknowledged at all (MQTT5 PUBACK
//     0x83, MQTT 3.1.1 disconnect, HTTP page retried) and is taken when it comes again;
//     faceagent_deadletter_backlog_refusals_total counts these. Refusals found only while
//     storing (a queue bound) are admitted past the bound, at most one message's worth.
//   - Forwarded acks and heartbeats are informational copies, journalled behind (no
//     fsync waited for): one not accepted upstream 50 ms after it came is appended then
//     and written at once. So a crash of the process loses at most those forwarded in
//     the last 50 ms and not yet accepted, plus the duration of one journal write (and
//     fsync); a power cut also the batch whose fsync had not returned (journal.sync =
//     "batch" adds up to batch_window; with "none" whatever the OS had not flushed). A
//     crash between the broker's PUBACK and the lazy reported record of a written one
//     sends it twice. Results are not affected: they come from the outbox's journal, not
//     from this log.
//   - Heartbeats coalesce while they wait: after an outage the back office gets each
//     terminal's latest heartbeat, not the ones in between (the device state in the store
//     is the live view). Acks are never coalesced.
//   - The forward backlog is bounded (8192 messages, 1 MiB of payloads): past it the
//     oldest acks not yet sent are dropped (faceagent_forward_dropped_total{reason=
//     "bound"}, a warning at most every 10 s) — the results, from the outbox's journal,
//     carry every task's outcome regardless; a heartbeat is refused only when no ack is
//     left to drop. With an external broker at most upstream.publish_window forwarded
//     messages are in flight: across a slow link the rate is about that many per round
//     trip, and the bound sheds the excess.
//   - The broker's Receive Maximum caps what is in flight on the upstream connection, for
//     the three report streams together (paho waits for a free slot): mosquitto's
//     max_inflight_messages defaults to 20, which at 50 ms is 400 messages/s for all
//     reports; raise it on the broker together with publish_window. A message without a
//     PUBACK after 30s is sent again (the copy in paho's session stays and may arrive
//     too).
//   - GOMEMLIMIT in the environment wins over agent.gomemlimit.
//   - Embedded broker: a result, deadletter or forwarded message is published once; what
//     the broker cannot give one subscriber is that subscriber's matter. A QoS 1 message
//     for a subscriber whose write queue is full waits in its session (kept or not) and
//     is written once the queue empties, in order; it is dropped for that subscriber
//     alone only when its session is full (broker max_session_bytes, max_queued_bytes,
//     max_queued_messages): the newest results of a back office away longer than its
//     session holds are lost to it, counted in faceagent_broker_dropped_total{reason}
//     and logged. Size max_session_bytes for the longest absence to bridge (4 MiB: about
//     3,500 results). The agent no longer publishes such a message again to everyone: that
//     stalled every healthy subscriber behind the slowest one, 9–15 s a round, and behind
//     an absent full session until it came back. A terminal's pending-writes queue is 32
//     messages (see "Memory"): it holds one command at a time, so a full queue means a
//     terminal that stopped reading.
package agent
