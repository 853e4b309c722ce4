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
// a PUBACK when it would. A notification's bytes count from the change until
// the client acknowledges it: a connection with 1024 notifications waiting,
// or 16 MiB waiting or unacknowledged, or that would take the notifications
// of all connections past Options.MaxBytes, is disconnected with
// CodeNotifyOverflow (0x97); one that keeps a notification waiting for room
// and acknowledges nothing for NotifyAckTimeout (30 s) is disconnected with
// CodeNotifyStalled (0x97). Either re-registers when it reconnects and
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
// not failed for 3 s: it is waiting for a connection). Upstream mochi returned on
// the first error: one moment without descriptors ended accepting until a restart.
//
// At most MaxConnecting connections (default 128) are between accept and CONNACK,
// and at most MaxClients + MaxConnecting are open: a socket beyond either is closed
// as soon as it is accepted, before any CONNECT is read (RefusedConnections counts
// them), so sockets that never send CONNECT cannot use up the process's
// descriptors. Each holds its slot for at most ConnectTimeout; while an attacker
// keeps MaxConnecting of them open, new clients are closed at accept and must retry
// (MQTT clients reconnect by themselves).
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
// Upstream mochi handed a session to whoever connected with its id: a
// terminal's credentials and the back office's id got the back office's queued
// results, and any user could disconnect any other connection. There is no
// option to bring that back: a deployment that renames a user (a new password
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
// count). A hundred refused 64 KiB requests and a second CONNECT made 22.8 MB of
// log with the values and the password; now under 1 KB (TestRefusedPacketsKeepTheLogSmall).
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
// records in memory, replays the journal at start and replaces it by a
// snapshot of the live records once dead ones outnumber them four times (and
// exceed 4,096), so it stays within a few times the live state. Not written:
// sessions that started clean and end with their connection (nor their
// subscriptions or messages), mochi's inline clients, $SYS counters. A
// session's records go when it expires or ends. A broker-sessions.db (bbolt)
// of an earlier release is no longer read: a warning names it once at start;
// it is left in place.
//
// Changes are written in group commits (groupcommit.go): one journal record,
// fsynced, for everything queued while the previous one was written; a
// message acknowledged before its record was committed is never written.
// Durability, exactly:
//
//   - Server().Publish returns once the message's records are on disk.
//     PublishDeferred does not wait; SyncSessions returns once everything
//     queued before it is on disk: publish a batch, sync once, then treat the
//     batch as stored.
//   - A QoS 1/2 message from a network client is acknowledged (PUBACK,
//     PUBREC) once its records for the kept sessions it went to are on disk:
//     mochi is patched to route before it acknowledges
//     (third_party/mochi/README.md), and the store's WaitBeforeAck waits for
//     the commit. Upstream mochi acknowledged first, and a SIGKILL then lost
//     acknowledged messages (TestAcknowledgedPublishSurvivesSIGKILL). A QoS 0
//     message is not waited for.
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
//     its answer would come on. Before, the PUBACK was written without waiting
//     (it could even reach the client before the answer, which waited in the
//     client's queue of pending writes), and a SIGKILL lost answers to
//     acknowledged requests (TestSoakStateStoreSIGKILL in agent/cmd/faceagent,
//     TestPersistentChangeAnsweredAfterSIGKILL).
//   - The deletion of an acknowledged message's record may be lost in a
//     crash: the message is sent again after the restart (at least once).
//   - A kept session's client record is on disk before its first packet
//     after CONNACK is read; a subscription, before its SUBACK is sent; a
//     retained message, when mochi's hook for it returns (waited for, whoever
//     published it).
//   - Messages on Options.VolatileTopics are never written: a kept session
//     gets them while the broker runs, not after a restart.
//   - Close writes everything queued.
//
// # Housekeeping
//
// mochi's event loop expires disconnected sessions, in-flight and retained
// messages, sends delayed wills and publishes $SYS, each on a 1-second ticker
// it offers no option to stop: an idle broker woke five times a second. The
// broker replaces those tickers (housekeeping.go) and ticks each task only
// when something of its kind is due, with mochi's own expiry rules: a session
// kept after its client left, at its session expiry; a delayed will, at its
// delay; a message, at its message expiry or mochi's 24 h maximum; $SYS
// every second only while a subscription matches a $SYS topic. An idle broker
// wakes once an hour (a safety scan). Expiries happen up to about a second
// later than the expiry itself, as with mochi's tickers.
//
// # Caveats
//
//   - With DataDir, a Server().Publish to a session that outlives its
//     connection (MQTT 5 session expiry > 0, 3.1.1 clean session off, or one
//     resumed) waits for an fsync: one after another they reach about
//     1,000-1,450 a second here (BenchmarkPersistentSubscriber), against
//     7,000-17,000 with PublishDeferred and a SyncSessions every 256. Sessions that started
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
//     client (third_party/mochi/README.md, "packet-id spaces"; mochi v2.7.9
//     kept both in one set keyed by packet id, and a request/response client
//     with several requests in flight lost responses and, after max in-flight
//     of them, got none). The receive quota (Receive Maximum) counts the
//     client's publishes, the send quota and MaxInflight the broker's
//     messages; the sessions journal holds only the broker's messages. A
//     client's QoS 2 flows are kept in memory only: after a broker restart
//     its PUBREL is answered PUBCOMP 0x92 (packet identifier not found), and
//     a QoS 2 PUBLISH it sends again is delivered again.
//   - One record (a message with its properties) larger than the journal's
//     MaxRecordSize (16 MiB) cannot be stored: the error is logged and the
//     message is kept in memory only. A compaction runs on the committer
//     goroutine: commits wait for it (it writes the live records only).
//   - A sessions journal that does not replay (a damaged record that is not a
//     torn tail) stops New with an error naming the directory; move it away
//     to start with no sessions.
//   - Each client has a queue of at most MaxPendingWrites packets waiting to
//     be written (default 1,024; mochi's 8,192 cost 64 KiB a client). A
//     message routed to a client whose queue is full is dropped by mochi,
//     QoS 1 too (and taken out of its in-flight messages): DroppedMessages
//     counts them and a warning is logged (at most once a second). An inline
//     publisher can watch mochi's OnPublishDropped itself (the agent resends
//     dropped results).
//   - With Options.TerminalTopic (the agent sets it to its devices' command
//     topics), a client whose first SUBSCRIBE is for such topics only gets a
//     queue of TerminalPendingWrites (32) instead: 352 bytes instead of 9.5 KB
//     a terminal. mochi makes the queue before CONNECT, so queues.go replaces
//     it on the client's writer goroutine, through Client.ResizeOutbound, an
//     API the vendored mochi has for it (third_party/mochi/README.md). A
//     terminal that later subscribes to more keeps the short queue; what
//     overflows it is dropped and counted like any drop. A terminal that
//     resumes a kept session (its subscriptions inherited, so publishers may
//     already route to it) keeps the full queue.
//   - A client that stops reading (its socket full) holds up only itself:
//     its writer waits up to WriteTimeout, then the client is disconnected (a
//     failed write ends the connection). Messages routed to it meanwhile wait
//     in its queue, or are dropped once it is full; publishers never wait for
//     it, nor does a message a takeover hands over (it goes through the new
//     connection's queue). A takeover of its session waits at most 0.5 s for
//     its DISCONNECT, and Close 0.5 s for all such clients together
//     (third_party/mochi/README.md, the "wedged peer" patches).
//   - mochi passes packets (~800 bytes) by value through deep frames, so each
//     connection costs 24 KiB of goroutine stacks: its reader needs 16 KiB
//     parked (5 KB in use, too much for the GC to halve it) and grows to 32
//     KiB for any PUBLISH or SUBSCRIBE until the next GC shrinks it;
//     its writer stays at 8 KiB. PINGREQ and PUBACK stay within 16 KiB.
//   - TLS certificates are read once, in New; rotating them needs a restart.
//   - A bcrypt check runs for every CONNECT with a user name (about 0.1 s at
//     cost 10 on an ARM gateway); it only delays that client, but a flood of
//     bad logins costs CPU.
//   - mochi's inline clients (Server().Publish, InjectPacket) bypass
//     authorization; the state store service's requests from inline clients
//     are ignored.
//   - Housekeeping and the terminal queues rely on methods the vendored mochi
//     has for them (Server.TakeOverLoopTicks, Client.ResizeOutbound and
//     others; third_party/mochi/README.md): a mochi upgrade must carry those
//     patches over, or agent/broker does not build.
//   - The broker manages one TCP (or TLS) listener; add WebSocket or Unix
//     listeners through Server() before Start if you need them.
package broker
