// Package remote is the gateway's remote management through the state store: the back
// office writes faceagent/{gw}/config (TOML overrides of the configuration) and
// faceagent/{gw}/control (one ControlCommand); the agent applies and executes them and
// answers in faceagent/{gw}/config/status and faceagent/{gw}/control/status (a Status
// as JSON).
//
// # Tutorial
//
//	r := remote.New(remote.Options{
//		Store:   kv.Engine{Store: b.Store(), Clock: clock}, // or kv.Client{C: sc}
//		Prefix:  "faceagent/gw/",
//		DoneLog: filepath.Join(dataDir, "control-done.json"),
//		Log:     log,
//		ApplyConfig: func(override []byte) (string, error) { ... },
//		KnownDevice: func(id string) bool { return cfg.Device(id) != nil },
//		Outbox:      ob,
//		SetDraining: func(on bool) { intake.SetDraining(on) },
//	})
//	r.Start(ctx)
//	defer r.Wait() // after ctx ends
//
//	// The back office, with any state store client:
//	//   SET faceagent/gw/config  "[dispatch]\nmax_tries = 9\n"
//	//   SET faceagent/gw/control {"id":"c-17","command":"pause","device":"2042253"}
//	// and reads (or watches) the status keys:
//	//   {"ok":true,"at":"…","applied":"retry_interval=… max_tries=9 …"}
//	//   {"id":"c-17","ok":true,"result":"paused","at":"…"}
//
// # Invariants
//
//   - Both keys are watched (KEYNOTIFY) before they are read, so no change between the
//     first read and the watch is missed; each signal makes the key be read again, so
//     several changes in a row are applied as the last one.
//   - The config key is applied as a whole each time (an empty or missing key clears the
//     override). A refused override leaves the running configuration as it was; the
//     status says why.
//   - A control command is executed once per id: the ids executed (the last MaxDoneIDs)
//     are kept in Options.DoneLog, written atomically before the status, so neither a
//     rewrite of the key with the same id nor a restart executes it again. A command that
//     failed is not executed again either: the back office sends a new id.
//   - Everything runs on one goroutine: config and control never interleave. Execute (the
//     operator's page) runs a command on the caller's goroutine, one at a time with the
//     control key's.
//
// # Caveats
//
//   - While the store is away at start (an external store), the watches are retried with
//     backoff, from 0.1 s doubling to 30 s; nothing is applied meanwhile.
//   - A status write that fails is logged, not retried: the next change writes it again.
package remote
