// Package intake takes the back office's tasks in: it parses task messages (agent/wire),
// journals the good tasks in the outbox and dead-letters the refused ones, before the
// message counts as taken. Messages arrive by three ways, all through one Taker:
//
//   - the embedded broker's interception of the tasks topic (agent/broker's Intercept
//     calls Taker.Intercepted inside the publisher's PUBLISH, before its PUBACK);
//   - the upstream connection's handler of the tasks subscription (Taker.Accept before
//     the PUBACK);
//   - the HTTP pull of an API that lists open tasks in pages (HTTPPull).
//
// # Tutorial
//
//	m := intake.NewMetrics(registry)
//	take := intake.NewTaker(intake.Options{MaxBatch: 1000, MaxMessageSize: 1 << 20,
//		Devices: []string{"d1", "d2"}, Logger: log}, m)
//	take.OpenDesired(desired)           // the desired whitelists (optional; before Open)
//	take.OpenFaces(faceStore)           // the face store (optional; before Open)
//	take.Open(ob, deadLetters)           // *outbox.Outbox; the deadletter log
//	err := broker.Intercept(tasksTopic, take.Intercepted)
//	...
//	err = take.Accept(ctx, payload)      // nil: taken, acknowledge it; else do not
//	take.Close()                         // shutdown begins: refuse, do not acknowledge
//
//	pull := intake.NewHTTPPull(intake.HTTPOptions{URL: u, PageSize: 100,
//		Interval: time.Minute, Timeout: 10 * time.Second}, take)
//	pull.Start(ctx); ...; pull.Wait()   // after ctx is done
//
// # Invariants
//
//   - Accept returns nil only once every good task of the message is in the outbox's
//     journal (or was already: a redelivery is a duplicate, stored once) and every refused
//     task's deadletter is in the deadletter log, durably. Only then may the message be
//     acknowledged; otherwise it comes again.
//   - The deadletters known before anything is stored (invalid tasks, unknown devices,
//     draining) must fit in the deadletter log (DeadLetters.Room), or nothing of the
//     message is stored: its good tasks are not taken by a message that is then refused.
//   - A task admitted past the outbox's bounds (at most one message's tasks over) is
//     dead-lettered: the deadletter is all that speaks for it.
//   - With desired whitelists (OpenDesired), each task the outbox does not hold yet is
//     applied there first, in the message's order, and flushed; then the outbox journals
//     the commands; one message at a time from the first change to the outbox's answer,
//     so both journals see the tasks in the same order. A crash between the two leaves
//     the change in the desired whitelists only: the message was not acknowledged, comes
//     again, finds its tasks unknown to the outbox and applies them again (setting a
//     record or deleting a person twice leaves the same list). A task the outbox holds
//     already is not applied again: a later task may have changed the person since, and
//     the outbox keeps the first copy's place. A task the desired whitelists refuse (over
//     one of their bounds) is dead-lettered; one the outbox refuses over its bound has its
//     change undone before the message is taken.
//   - With a face store (OpenFaces), a message's faces are stored (a face with data, its
//     hash checked) or held (a face sent without data) in the message's order, before
//     anything else of it is stored, and held until its desired-state change is durable
//     (Accept's return), so that a face sweep (which reads the desired whitelists inside
//     Quiet) never removes a face a task is bringing. A face sent without data that the
//     gateway does not hold, or one the store refuses (over [faces] max_bytes), dead-
//     letters its task alone, with a reason naming the face's sha256 and the person. The
//     face's bytes are written from the parsed task's buffer: no copy.
//   - Accept keeps nothing of payload after it returns: the embedded broker hands it the
//     packet's own buffer.
//
// # Caveats
//
//   - With desired whitelists, messages are taken one at a time, each waiting for two
//     fsyncs (the desired whitelists', then the outbox's) before the next one's turn.
//   - Accept runs on the caller's goroutine (with the embedded broker: the publisher's
//     connection): a slow journal slows that publisher, which is the backpressure wanted.
//   - Between NewTaker and Open, and after Close, every message is refused with
//     ErrNotReady (not acknowledged).
//   - While draining (SetDraining) every new task is dead-lettered as "gateway draining".
//   - The HTTP pull relies on the back office to stop listing a task once its result was
//     posted; a task listed again while queued is a duplicate, one listed again after it
//     finished is executed again (at-least-once).
package intake
