// Package ui is the operator's page: one HTML page served by the agent ([ui] listen) that
// shows every terminal (online, paused, sync state, queue, in flight, persons held and
// desired, failed commands held, last error, last heartbeat), the failed commands held for
// retry, the deadletters since the start, and the agent's health (the /healthz causes,
// upstream, the journals' sizes); it updates live and offers pause and resume of a
// terminal, retry and purge of failed commands, and resync of a terminal's whitelist.
//
// # Tutorial
//
//	u, err := ui.New(ui.Options{
//		State:   func() ui.State { … },                 // built from what the agent keeps
//		Control: func(action, dev string) (string, error) { return rem.Execute(…) },
//		Token:   cfg.UI.Token, Users: b,                // *broker.Broker has CheckPassword
//		Log:     log, Metrics: ui.NewMetrics(registry),
//	})
//	u.Start(ctx)                  // the hub of the live streams
//	mux.Handle("/", u.Handler())  // GET /, /api/state, /api/events; POST /api/action
//	devstate.Options{Changed: u.Notify} // the parts say when something changed
//	u.DeadLettered(payloads)      // tasks refused at intake, for the page
//	u.Close(); u.Wait()           // before the HTTP server's Shutdown
//
// # The endpoints
//
//   - GET / is the page: one file embedded in the binary (page.html: markup, one inline
//     style, one inline script; no build step, no external asset), gzip-compressed once at
//     start and served so to clients that accept it, with a Content-Security-Policy that
//     allows that style and that script by their SHA-256 and nothing else (connections to
//     the page's own origin only).
//   - GET /api/state is the State as JSON.
//   - GET /api/events is a server-sent event stream: the State at once, then an event
//     "state" each time it changes, and a comment every KeepAlive while nothing does.
//   - POST /api/action with {"action":"pause","device":"2042253"} runs an action: pause,
//     resume (a device), retry-failed, purge-failed, resync (a device, or every device
//     when "device" is empty), through Options.Control: the control key's code path.
//
// # What holds
//
//   - Reading needs no credentials: the page is read-only without them. An action needs
//     "Authorization: Bearer <token>" (the [ui] token_file's content, compared in constant
//     time through SHA-256) or "Authorization: Basic" with a user of the broker's users
//     file (bcrypt, one check at a time; a second concurrent one is answered 429). Never a
//     cookie: another site cannot make a browser send the header, so there is no CSRF.
//     Missing or wrong credentials: 401; no token and no users configured: 403. Every
//     action is logged with who asked for it (the user's name, or "token").
//   - The page builds its DOM with textContent only: nothing received (a deadletter's
//     reason, a terminal's last error) is ever parsed as markup. The credentials are kept
//     in the tab's sessionStorage.
//   - The live streams are driven by changes, not by polling: the parts call Notify
//     (devstate's Changed on every terminal event and control action, the deadletter
//     log, each action, and the health causes from where they change: the upstream link
//     going down or up, a journal refusing writes, the broker's Accept failing or
//     recovering, its sessions journal failing or recovering, the state store refusing a
//     terminal's state or taking it again), and the hub builds the state at most once per
//     MinInterval and sends it when it differs from the last one sent. It arms one timer
//     for the moment the first online terminal goes offline unless heard from (nothing
//     else announces it). With no stream open the hub builds nothing and arms no timer;
//     with streams open and nothing changing, it wakes once per KeepAlive and sends the
//     state if it changed.
//   - Bounded: at most MaxClients streams (one more: 503); each keeps one pending message,
//     the latest state (a slow reader skips states, it never queues them); a write that
//     takes longer than WriteTimeout drops the stream (the browser reconnects by itself);
//     an action's body is at most MaxActionBody bytes; at most MaxDeadLetters deadletters
//     of at most MaxDeadLetterPayload bytes are kept for the page.
//
// # Caveats
//
//   - The deadletters shown are those since the agent started (the log itself keeps only
//     those not yet accepted upstream); the failed commands are the most recent that the
//     outbox holds.
//   - The state is sent whole on each change: meant for the tens to hundreds of terminals
//     of one gateway.
//   - Plain HTTP: keep [ui] listen on loopback, or put a TLS proxy in front of it; a
//     token sent over the network in clear can be read.
package ui
