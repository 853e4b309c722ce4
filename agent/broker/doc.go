// Package broker is faceagent's embedded MQTT 3.1.1/5 broker
// (github.com/mochi-mqtt/server/v2) with a faithful Azure IoT Operations state
// store inside it, so the agent, the official SDK clients and anyone's own
// client work on one machine without a cluster.
//
// # Tutorial
//
//	b, err := broker.New(&broker.Options{
//		Listen:         "127.0.0.1:1883",
//		AllowAnonymous: true,           // or UsersFile: "/etc/faceagent/users.toml"
//		DataDir:        "/var/lib/faceagent", // sessions and persistent keys survive restarts
//	})
//	if err != nil { ... }
//	if err := b.Start(); err != nil { ... } // listening when it returns
//	defer b.Close()
//
// Clients publish state store requests (RESP3 payloads) with QoS 1, a
// Response Topic and Correlation Data on InvokeTopic; the answer comes back
// on the response topic. See package statestore for the commands, and
// docs/design.md "State store wire facts" for the wire where it differs from
// the protocol document ("wire fact N" in this package's comments).
//
// # The state store service
//
// A mochi hook serves InvokeTopic in OnPublish, on the requesting client's
// read loop: the engine is in memory, so nothing there waits for I/O. The
// request is answered and not routed (CodeSuccessIgnore: PUBACK sent). The
// response is injected through a dedicated inline client whose id no real
// client uses, because the Go SDK subscribes to its response topic with No
// Local. It carries __stat=200, __protVer=1.0, the value's version in __ts
// where there is one, content type application/octet-stream and the
// request's correlation data.
//
// Preconditions: a response topic equal to InvokeTopic or starting with
// NotifyTopicPrefix, or that is no valid topic name (wildcards, $SYS,
// $share), disconnects the client with CodeForbiddenResponseTopic; a
// request without a response topic is dropped and logged (there is nowhere
// to answer). For a user with publish rules the response topic must belong
// to the client or be allowed by those rules; otherwise the request is
// refused (PUBACK 0x87), since responses are published without an ACL check.
// A client owns clients/{clientId}/… (the .NET and Rust SDKs' response
// topics), and is lent the one topic
// clients/{UPPERHEX(clientId)}/statestore/v1/…/command/invoke/response (the
// Go SDK's) while no client or kept session has the id UPPERHEX(clientId),
// whose namespace it is: client "AB" answers itself on clients/4142/… only
// while there is no client "4142". A request not sent with QoS 1 or without
// correlation data is answered with "-ERR " + ErrTextQoS or
// ErrTextNoCorrelation. A response's Message Expiry is what remains of its
// request's (rounded up to whole seconds, at least 1), so it never outlives
// the request; a request without one gets mochi's maximum.
//
// KEYNOTIFY notifications are written straight to the connection that
// registered, on NotifyTopic(clientID, key), whether or not it subscribed to
// that topic (the Go SDK never does; the real service delivers anyway), so a
// subscriber gets each one exactly once. Each connection has a bounded queue
// (statestore.NotifyQueue) and a goroutine writing it, which never leaves more
// QoS 1 PUBLISHes unacknowledged than the client's Receive Maximum (MQTT 5
// section 3.3.4; mochi's own messages to the client count too) and waits for
// a PUBACK when it would. A notification sent is a message the client's session
// holds until acknowledged: it is admitted within MaxSessionBytes and
// MaxQueuedBytes as a routed message is (its packet, ~1 KB for a small one),
// and waits in the queue for a PUBACK when they have no room. Its key and value
// bytes count from the change until the client acknowledges it: a connection
// with 1024 notifications waiting, or MaxPendingWriteBytes (64 KiB) of them
// waiting or unacknowledged, or that would take the notifications of all
// connections past Options.MaxBytes, is disconnected with CodeNotifyOverflow
// (0x97); one that keeps a notification waiting for room and acknowledges
// nothing for NotifyAckTimeout (30 s) is disconnected with CodeNotifyStalled
// (0x97). Either re-registers when it reconnects and
// rereads the keys. Registrations belong to the connection: they end when it
// disconnects or is taken over.
//
// # Connections
//
// The broker serves one TCP listener (TLS when configured) of its own rather
// than mochi's, to add what mochi leaves out: a connection must send CONNECT
// within ConnectTimeout (10 s), every write must finish within WriteTimeout
// (30 s), and Close closes connections that never finished CONNECT. Without
// these a silent peer, or one that stops reading, holds a goroutine forever
// and makes Close hang. Close sends the DISCONNECTs side by side, up to 64 at
// once, so clients that stopped reading cost it one DISCONNECT grace (0.5 s)
// together, not one each.
//
// Accepting never stops but for Close. A failed Accept (out of file descriptors
// or buffers, a connection aborted in the queue) is logged (at most once a second
// per error) and retried after a pause of 5 ms doubling to 1 s, as net/http's
// Server.Serve does; meanwhile Healthy returns the error ("broker: not accepting
// connections since …"), and it returns nil again once Accept succeeds (or has
// not failed for 3 s: it is waiting for a connection). OnHealthChanged's function
// hears when Accept begins failing, when it succeeds again, and when the 3 s
// lapse makes Healthy nil. Accepting must not end on an error: a moment without descriptors would
// otherwise stop it until a restart.
//
// At most MaxConnecting connections (default 128) are between accept and CONNACK,
// and at most MaxClients + MaxConnecting are open: a socket beyond either is closed
// as soon as it is accepted, before any CONNECT is read (RefusedConnections counts
// them), so sockets that never send CONNECT cannot use up the process's
// descriptors. Each holds its slot for at most ConnectTimeout; while an attacker
// keeps MaxConnecting of them open, new clients are closed at accept and must retry
// (MQTT clients reconnect by themselves).
// Every client's keep-alive is bounded by Options.ServerKeepAlive (default
// 300 s; [broker] server_keep_alive): a client asking for none (0) or for more
// is held to it, told so in CONNACK's Server Keep Alive under MQTT 5, and
// disconnected after 1.5 times it without a packet, MQTT 3.1.1 clients too
// (they cannot be told: one asking for more than the bound must ping within
// it). So every connection that goes silent after CONNECT is closed, whatever
// keep-alive it asked for.
//
// After any other DISCONNECT it sends (a fault in the client's packets such as
// 0x93 Receive Maximum exceeded, a session takeover, a notification overflow)
// the broker shuts its side of the connection and reads and drops what the
// client still sends, until the client closes or mochi's DisconnectLinger (1 s)
// has passed, so that a client still sending reads the reason code rather than
// a TCP reset (which closing at once would cause). Close ends such connections at once.
//
// # Users file
//
// Users are TOML, with bcrypt password hashes (cost 10 or more recommended):
//
//	[[users]]
//	name          = "agent"
//	password_hash = "$2a$10$…"   # htpasswd -nbB agent secret, or bcrypt.GenerateFromPassword
//	publish       = ["faceagent/#", "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"]
//	subscribe     = ["faceagent/#", "clients/%c/#"]   # %c: the client id, %u: the user name
//	read_keys     = ["faceagent/"]                    # state store key prefixes for GET, KEYNOTIFY
//	write_keys    = ["faceagent/gw-01/"]              # … for SET, DEL, VDEL
//	certificate_cn = ["gw-01-agent"]                  # with mutual TLS: see "Certificates and users"
//
// A list left out allows everything; an empty list allows nothing. A key
// outside the prefixes is answered "-ERR not authorized"; a topic outside
// the rules is refused as MQTT refuses it (PUBACK or SUBACK 0x87); a CONNECT
// whose will names such a topic is refused (CONNACK 0x86). Nobody may
// publish under the notification topics, whatever the rules: only the store
// writes there, so notifications cannot be forged. Without
// a user name a client is let in only with AllowAnonymous, under the rules
// of an optional [anonymous] table (or Options.Anonymous; neither: all):
//
//	[anonymous]
//	write_keys = []   # anonymous clients may read but not write keys
//
// # Sessions belong to their user
//
// A CONNECT whose client id is held by another user — a connected client, a kept
// session whose client is offline, or one restored from the sessions journal
// after a restart (its record keeps the user name) — is refused with CONNACK
// 0x85 Client Identifier not valid (MQTT 3.1.1: 0x02 Identifier rejected), and
// the holder is left alone: not disconnected, its session not taken. The refusal
// is logged with the client id and both user names. Anonymous clients count as
// one user, "": an anonymous client cannot take a user's id, nor a user an
// anonymous client's, but anonymous clients can take each other's (see
// docs/security.md, "Anonymous mode"). The same user takes its own session over
// as MQTT requires [MQTT-3.1.4-3]. The check comes after the password, so it
// tells nothing to a client without credentials.
//
// Without this check whoever connects with a client id gets its session: a
// terminal's credentials and the back office's id would get the back office's
// queued results, and any user could disconnect any other connection. The check
// cannot be turned off: a deployment that renames a user (a new password
// keeps the name, and the sessions) must let the old user's kept sessions expire,
// or start with an empty DataDir/broker-sessions.
//
// # Certificates and users
//
// With mutual TLS (TLS.ClientCAFile) and users, a user's client certificate must
// be its own: its Subject Common Name must equal the user name, or be one of the
// user's certificate_cn when the entry lists them (one user for many
// terminals, each with a certificate of its own). Otherwise the CONNECT is
// refused with 0x87 Not authorized (MQTT 3.1.1: 0x05), after the password check
// (a wrong password is still 0x86). This is mosquitto's
// use_identity_as_username rule, with the password still required. An
// anonymous client (when AllowAnonymous) needs a valid certificate and no more.
//
// # Logs
//
// A line about a client names its client id, the packet type where there is one
// ("packet.type=Publish packet.id=7 packet.qos=1 packet.payload_bytes=…", never
// the packet) and the reason; it never holds a payload, a state store value or
// a password. The broker's logger (mochi's, the hooks', the store's) clips every
// string value to 256 bytes (client ids and topics may be 64 KiB) and prints
// byte slices and structs as their size or type only. Lines about a client,
// and every line of the listener, come at most once a second per reason (the
// message and its error), the next one counting those held back
// ("suppressed=N"; a reason that does not come again does not report its
// count). So a client repeating large refused requests can neither fill the disk
// with log nor get its values or password into it (TestRefusedPacketsKeepTheLogSmall).
//
// # Persistence
//
// Without DataDir everything lives in memory, as mochi does by default. With
// DataDir, the broker's own storage hook (sessions.go) keeps kept sessions,
// their subscriptions and in-flight messages, and retained messages in a
// journal (package journal) in DataDir/broker-sessions/, so a client with a
// session expiry gets what was queued for it across a broker restart; and the
// state store keeps the keys written with "aio-persistence: true" in
// DataDir/statestore.snapshot (see package statestore); a request that
// changes such a key is answered only once the snapshot holding the change
// is fsynced (the answer is sent by the store's persistence goroutine, not
// the client's read loop), and acknowledged after that (see "Durability,
// exactly"). Other keys are lost on restart, as in the real service.
//
// The journal holds puts and deletes of records (sessionrecord.go: a client,
// a subscription, an in-flight message with its packet id, a retained
// message, each in mochi's storage encoding); the broker mirrors the live
// records in memory and replays the journal at start. Not written: sessions
// that started clean and end with their connection (nor their subscriptions
// or messages), mochi's inline clients, $SYS counters. A session's records go
// when it expires or ends. A broker-sessions.db (bbolt) file in DataDir is
// not read: a warning names it once at start; it is left in place.
//
// Disk bound (sessioncompact.go): once the dead bytes in the journal's files
// (replaced and deleted records) exceed both a segment and the live records'
// bytes, a snapshot of the live records replaces the files, written in the
// background while commits go on. With L the live records' bytes (about 500
// bytes each plus 4/3 of its payload: mochi's storage encoding is JSON; the
// live set is bounded by the kept sessions'
// in-flight and queued messages, max_queued_messages each, their
// subscriptions and the retained messages) and S the segment size
// (Options.SessionsSegmentSize, 4 MiB), broker-sessions/ occupies at most
//
//	2×L + max(S, L) + S
//
// on disk, plus the group commit that crossed the threshold and what is
// committed while a snapshot is being written: the files (L live, up to
// max(S, L) dead), a snapshot being written (L) and the new open segment,
// whose blocks are reserved when it is created. While the live records are small, as they are unless a session
// keeps many messages, that is about two segments: 8 MiB. A session that
// keeps many messages (offline, not acknowledging, not reading) adds its
// messages to L, three times at most; it cannot keep the journal from
// shrinking, nor can anything else: only dead bytes start a compaction, and
// each one rewrites the live records once after at least as many dead bytes,
// so the journal writes each byte of session data at most about twice.
// TestSessionsJournalStaysBoundedUnderLoad holds the directory to this bound
// under the state store SDK's request/response load; docs/benchmarks.md has
// the bytes on disk over a run.
//
// Changes are written in group commits (groupcommit.go): one journal record,
// fsynced, for everything queued while the previous one was written; a
// message acknowledged before its record was committed is never written.
// Durability, exactly:
//
//   - Server().Publish returns once the message's records are committed, or
//     their commit failed: mochi's Publish has no storage error to return.
//     PublishDeferred does not wait. A publisher that must know takes
//     Broker.SessionsMark before it publishes a batch and calls
//     SyncSessionsSince after: nil means all of the batch is on disk
//     (SyncSessions reports only the last commit's error).
//   - A QoS 1/2 message from a network client is acknowledged (PUBACK,
//     PUBREC) once its records for the kept sessions it went to are on disk:
//     mochi is patched to route before it acknowledges
//     (third_party/mochi/README.md), and the store's WaitBeforeAck waits for
//     the commit, so a SIGKILL cannot lose an acknowledged message
//     (TestAcknowledgedPublishSurvivesSIGKILL). A QoS 0 message is not
//     waited for.
//   - A state store request is acknowledged once its answer is on disk for
//     the requester's kept session (the session that gets it: the client
//     subscribes to its response topic), so after a crash the resumed
//     session gets every answer it had not acknowledged. The answer is routed
//     as the request is read and its record is waited for with the request's
//     PUBACK (sessions.go). A request that changes a persistent key is
//     answered by the store's persistence goroutine once the snapshot holding
//     the change is fsynced; its PUBACK waits for that answer and its record
//     (answerwait.go), so the PUBACK also means the change is on disk. Both
//     waits hold only the requesting connection's read loop, one wait for a
//     burst of requests. A client on a session that ends with its connection
//     is not waited for: it has no record, and a crash ends the connection
//     its answer would come on. Without these waits the PUBACK could reach
//     the client before the answer (still in the client's queue of pending
//     writes), and a SIGKILL would lose answers to acknowledged requests
//     (TestSoakStateStoreSIGKILL in agent/cmd/faceagent,
//     TestPersistentChangeAnsweredAfterSIGKILL).
//   - The deletion of an acknowledged message's record may be lost in a
//     crash: the message is sent again after the restart (at least once).
//   - A kept session's client record is on disk before its CONNACK is sent
//     (with a clean start's deletion of the session it replaces; mochi is
//     patched to wait, third_party/mochi/README.md); a subscription, before
//     its SUBACK is sent; a retained message from a network client before its
//     PUBACK (as a message to a kept session), from Server().Publish or a
//     will when mochi's hook for it returns.
//   - Messages on Options.VolatileTopics are never written: a kept session
//     gets them while the broker runs, not after a restart.
//   - Close writes everything queued.
//
// # A full disk
//
// When a write or fsync of the sessions journal fails (sessionfail.go), what
// needs a record is refused, never acknowledged: a QoS 1/2 PUBLISH that went
// to a kept session, or a retained one, gets no PUBACK and its client is
// disconnected (0x80; it sends it again); a kept session's SUBSCRIBE gets
// SUBACK 0x80 for each filter, and the subscription is not made; a CONNECT
// of a kept session (or a clean start over a stored one) gets CONNACK 0x88
// (MQTT 3.1.1: 0x03); SyncSessions and SyncSessionsSince return the error.
// Messages routed to kept sessions meanwhile are delivered while the broker
// runs but are not stored. With a backoff (0.1 s, doubling up to 5 s) the
// broker writes its live records anew (journal.Reset: a new snapshot, the
// old files deleted, none of them read) and takes writes again once that
// succeeds, without a restart: records whose fsync failed are not counted as
// on disk. The deletions that failed meanwhile (acknowledged messages,
// UNSUBSCRIBEs, sessions that ended) are written then; an UNSUBSCRIBE is
// acknowledged even when its deletion failed (mochi has no reason code to
// change by then), and a restart before the journal takes writes again
// brings that subscription back. Broker.SessionsErr reports the failure while
// it lasts (the agent's /healthz and faceagent_up, not its watchdog: a
// restart would not help; OnHealthChanged's function hears when the failure
// begins and ends), Broker.SessionsStats counts failures, recoveries
// and refused writes. The failure is logged once, then once a minute while it
// lasts, its end once, and the refusals at most once every 10 s.
// # Bounds
//
// Everything a client can make the broker hold has a bound (Options; the agent's
// [broker] keys in configs/agent.toml; mochi patched, "byte bounds" in
// third_party/mochi/README.md). What a message costs is mochi's MessageBytes: its
// payload, topic and properties plus ~830 bytes (the packet struct it lives in); a
// subscription ~0.6 KB a level of its filter plus ~0.5 KB (SubscriptionBytes).
//
//   - MaxClients (128): clients the broker knows, connected or kept for their session
//     after they left. A CONNECT of a new client id beyond it is refused (CONNACK 0x97;
//     MQTT 3.1.1: 3, server unavailable); resuming or taking over a known session is not.
//   - MaxSubscriptions (64): subscriptions of one session; one more gets SUBACK 0x97
//     (3.1.1: 0x80). Replacing one costs nothing.
//   - MaxPendingWriteBytes (64 KiB): messages queued for writing to one client. A QoS 1/2
//     message that does not fit, or that would overtake one already waiting, waits in the
//     client's session (counted there) and is written, in order, once the queue is empty;
//     a QoS 0 one is dropped for that client (OnPublishDropped). One message larger than the
//     bound still goes when the queue is empty, counted in MaxQueuedBytes until written. A
//     KEYNOTIFY connection's queue of notifications is bounded by it too (their keys and
//     values, waiting or unacknowledged).
//   - MaxSessionBytes (4 MiB): what one session holds: messages queued while it is away,
//     waiting to be written, or sent and not yet acknowledged; its subscriptions; its
//     will (its own QoS 1/2 flows are bounded by ReceiveMaximum instead); the KEYNOTIFY
//     notifications sent to it and not yet acknowledged. A QoS 1/2
//     message that does not fit is dropped for that session, the newest (what is queued
//     stays in order; a message already sent is never taken back); a subscription, will
//     or QoS 2 message that does not fit is refused (SUBACK, CONNACK, PUBREC 0x97); a
//     notification waits in its connection's queue for a PUBACK.
//   - MaxQueuedBytes (12 MiB): the same summed over every session (QueuedBytes). A session
//     holding less than its share (MaxQueuedBytes / MaxClients: 96 KiB) is never refused
//     for the total, so clients that fill it (that stopped reading, say) cannot starve a
//     terminal's commands or a back office's results; the total stays within twice the
//     bound.
//   - MaxRetainedBytes (4 MiB): the retained messages (the message, its topic, ~0.6 KB a
//     level of it; mochi's own $SYS topics not counted). One that does not fit is refused
//     (PUBACK/PUBREC 0x97) to an MQTT 5 QoS 1/2 publisher, and delivered without being
//     retained otherwise.
//   - MaxInboundBytes (8 MiB): packets over 64 KiB being read and handled at once, all
//     connections together. A connection whose packet does not fit waits, reading nothing
//     meanwhile; one larger than the bound goes when nothing else is read.
//
// A message dropped for one subscriber is that subscriber's loss, never its publisher's
// concern: it is acknowledged to its publisher (who may have reached others, and the
// hooks may have taken it), counted (Dropped, DroppedMessages, Refused) and logged at most
// once a second for each bound. A subscriber that stops reading therefore costs only
// itself: its queue and its session fill up to their bounds, publishers never wait for it,
// and once its writer times out (WriteTimeout) its session keeps what it holds.
//
// A restart is held to the same bounds: the sessions journal's replay keeps, in the
// journal's order, the sessions, subscriptions, messages, wills and retained messages that
// fit, drops the rest (the newest), logs it once with counts and compacts the journal, so
// a journal written under larger bounds or by an earlier release never needs more memory
// than the bounds allow (restorebounds.go).
//
// The worst case the defaults allow, term by term, is in docs/benchmarks.md ("Worst-case
// memory of the broker's bounds").
//
// # Housekeeping
//
// mochi's event loop expires disconnected sessions, in-flight and retained
// messages, sends delayed wills and publishes $SYS, each on a 1-second ticker
// it offers no option to stop, so an idle broker would wake five times a second. The
// broker replaces those tickers (housekeeping.go) and ticks each task only
// when something of its kind is due, with mochi's own expiry rules: a session
// kept after its client left, at its session expiry; a delayed will, at its
// delay; a message, at its message expiry or Options.MaxMessageExpiry; $SYS
// every second only while a subscription matches a $SYS topic. An idle broker
// wakes once an hour (a safety scan). Expiries happen up to about a second
// later than the expiry itself, as with mochi's tickers.
//
// # Caveats
//
//   - With DataDir, a Server().Publish to a session that outlives its
//     connection (MQTT 5 session expiry > 0, 3.1.1 clean session off, or one
//     resumed) waits for an fsync, so one after another they go at the
//     disk's fsync rate; PublishDeferred with a SyncSessions every few hundred
//     shares one fsync among them (BenchmarkPersistentSubscriber; figures in
//     docs/benchmarks.md). Sessions that started
//     clean and end with their connection are not written (ephemeral.go),
//     nor are mochi's $SYS counters.
//   - A network client publishing QoS 1/2 messages to kept sessions gets its
//     PUBACKs once they are on disk: one group commit for the messages of its
//     that were read together (a burst), so a publisher with one message in
//     flight at a time waits an fsync for each. The same holds for a state
//     store client on a kept session: its requests' PUBACKs wait for the
//     answers' records (and, for a change of a persistent key, for the
//     snapshot first), and its read loop reads its next packets only after
//     that wait; an SDK client, whose call also waits for the PUBACK, sees
//     the fsync in every call's latency (docs/benchmarks.md, "Sustained
//     load"). The client's PUBACKs of answers read between its requests do
//     not end a burst (third_party/mochi/README.md). A persistent change
//     whose snapshot cannot be written holds the PUBACK for at most
//     WriteTimeout; then the client is disconnected unacknowledged (0x80) and
//     sends the request again. A session taken over while its
//     old connection waits for that commit does not take a QoS 1 PUBACK
//     along: the client sends that PUBLISH again on the new connection and
//     is acknowledged once the copy routed there is stored (at least once: a
//     subscriber may get it twice). A QoS 2 flow goes with the session: a
//     PUBLISH sent again is answered with a PUBREC (once stored) and not
//     delivered again, a PUBREL completes it.
//   - Packet ids are per direction (MQTT): a client's own QoS 1/2 publishes
//     (the PUBACK or PUBREC held until the message is stored, a QoS 2 flow
//     until PUBREL) are kept apart from the messages the broker sends that
//     client (third_party/mochi/README.md, "packet-id spaces"): with both in
//     one set keyed by packet id, a request/response client with several
//     requests in flight would lose responses and, after max in-flight of
//     them, get none. The receive quota (Receive Maximum) counts the
//     client's publishes, the send quota and MaxInflight the broker's
//     messages; the sessions journal holds only the broker's messages. A
//     client's QoS 2 flows are kept in memory only: after a broker restart
//     its PUBREL is answered PUBCOMP 0x92 (packet identifier not found), and
//     a QoS 2 PUBLISH it sends again is delivered again.
//   - One record (a message with its properties) larger than the journal's
//     MaxRecordSize (16 MiB) cannot be stored: the error is logged and the
//     message is kept in memory only.
//   - A group commit larger than 1 MiB is written as several journal
//     records: a crash after some of them were written but before the commit
//     was confirmed replays those (a refused SUBSCRIBE among them would come
//     back). Only bursts of large messages make such commits.
//   - A sessions journal that does not replay (a damaged record that is not a
//     torn tail) stops New with an error naming the directory; move it away
//     to start with no sessions.
//   - Each client has a queue of at most MaxPendingWrites packets waiting to
//     be written (default 1,024; each slot is 8 bytes allocated at accept for
//     every client) and
//     MaxPendingWriteBytes bytes. Beyond either a QoS 1/2 message waits in the
//     session and a QoS 0 one is dropped for that client (see "Bounds").
//   - With Options.TerminalTopic (the agent sets it to its devices' command
//     topics), a client whose first SUBSCRIBE is for such topics only gets a
//     queue of TerminalPendingWrites (32) instead, a 352-byte allocation
//     where 1,024 slots are 9,472 bytes. mochi makes the queue before CONNECT, so queues.go replaces
//     it on the client's writer goroutine, through Client.ResizeOutbound, an
//     API the vendored mochi has for it (third_party/mochi/README.md). A
//     terminal that later subscribes to more keeps the short queue; what
//     overflows it waits in its session or is dropped like any client's. A terminal that
//     resumes a kept session (its subscriptions inherited, so publishers may
//     already route to it) keeps the full queue.
//   - A message that waits in a session for its client's writer loses its message
//     expiry interval (mochi marks waiting messages with Expiry -1, as it does those
//     waiting for send quota): it is sent without one.
//   - A resumed session's connection, also one that takes the session over while
//     messages are routed to it, is sent each unacknowledged message once
//     (TestTakeoverDuringPublishes). One that was in flight when the session's earlier
//     connection ended goes with DUP, also when that connection had it still queued or
//     the session was offline when it came (mochi does not tell these apart); one that
//     waited in the session for the writer goes without. A connection that starts clean
//     is sent nothing of the session it discards, also not a message routed to that
//     session's connection as the takeover happened.
//   - The bounds count what mochi's structures cost, they do not measure it: a
//     message's ~830 bytes besides its parts is the packet struct it is held in, and a
//     subscription's count assumes no other filter shares its levels. The copy a write
//     encodes is not counted (it is transient), nor are the acknowledgements held while
//     more of a publisher's QoS 1 messages are buffered (up to ~250 a connection); both
//     scale with the connected clients (docs/benchmarks.md, "Worst-case memory").
//   - A client that stops reading (its socket full) holds up only itself:
//     its writer waits up to WriteTimeout, then the client is disconnected (a
//     failed write ends the connection). Messages routed to it meanwhile wait
//     in its queue, then in its session, within their bounds; publishers never wait for
//     it, nor does a message a takeover hands over (it goes through the new
//     connection's queue). A takeover of its session waits at most 0.5 s for
//     its DISCONNECT, and Close 0.5 s for all such clients together
//     (third_party/mochi/README.md, the "wedged peer" patches).
//   - Each connection costs two goroutine stacks, its reader's and its
//     writer's; a reader that handles a PUBLISH or SUBSCRIBE grows its stack
//     (mochi's packet handling is deep) until a later collection shrinks it
//     (docs/benchmarks.md, "Goroutine stacks with the patched mochi" and
//     "Broker memory per connection").
//   - TLS certificates are read once, in New; rotating them needs a restart.
//   - A bcrypt check runs for every CONNECT with a user name (slow by
//     design, and slower the higher the cost); it only delays that client,
//     but a flood of bad logins costs CPU.
//   - mochi's inline clients (Server().Publish, InjectPacket) bypass
//     authorization; the state store service's requests from inline clients
//     are ignored.
//   - Housekeeping and the terminal queues rely on what the vendored mochi
//     has for them (Options.LoopTicks, Client.ResizeOutbound and others;
//     third_party/mochi/README.md): a mochi upgrade must carry those patches
//     over, or agent/broker does not build.
//   - The broker manages one TCP (or TLS) listener; add WebSocket or Unix
//     listeners through Server() before Start if you need them.
package broker
