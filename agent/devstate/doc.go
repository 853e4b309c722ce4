// Package devstate keeps each terminal's state in the state store: one key per device,
// faceagent/{gw}/devices/{id}, holding a msgp-encoded wire.DeviceState (online, paused,
// queue depth, in flight, counts, last ack, last heartbeat, firmware, persons, last
// error; with Options.Desired the desired whitelist's length, whether the terminal is in
// sync, and the last reconciliation's time and status), written with an expiry so that it
// lapses when the gateway is gone.
//
// # Tutorial
//
//	w := devstate.New(devstate.Options{
//		Devices: ids, Store: kv.Engine{Store: b.Store(), Clock: clock}, Status: ob,
//		Prefix: "faceagent/gw/devices/", WriteInterval: time.Second,
//		HeartbeatTimeout: 30 * time.Second, Timeout: 5 * time.Second,
//		Log: log, Metrics: devstate.NewMetrics(registry),
//	})
//	w.Start(ctx)
//	defer w.Wait() // after ctx ends
//	// From the event paths; none of these blocks:
//	w.Touch(id)            // an ack, a link up or down, a new task
//	w.Heartbeat(id, hb)    // firmware and persons from the terminal
//	w.Result(res)          // a finished command: its error is the device's last error
//	w.Synced(id, wire.SyncDone, time.Now()) // a reconciliation started or ended
//	healthz := w.RefusedWarnings()
//	page := w.States() // every device's state as of now, as it would be written
//
// # Invariants
//
//   - Callers only mark devices changed; the writes happen on the writer's goroutine, so
//     a slow or absent store delays nothing but the next state write.
//   - A device is written when something about it changed, at most once per
//     WriteInterval (but at once when a heartbeat carries the desired digest while its
//     last state said not in sync: at most one more write per heartbeat, so that coming
//     in sync shows without a WriteInterval's delay), and an unchanged state again once
//     per HeartbeatTimeout, with an
//     expiry (PX) of three HeartbeatTimeouts: the key lapses only when the gateway is
//     gone. A state unchanged apart from its timestamp is not written before its refresh.
//   - Every device is written once at start.
//   - Options.Changed hears of every change (Touch, Heartbeat, Result, Synced), also of a
//     device already waiting for its write, and of a device that RefusedWarnings begins or
//     ceases to name; States reads them without writing.
//   - A device is in sync when its last heartbeat says protocol 2 or later with the
//     desired whitelist's digest and the outbox holds nothing queued or in flight for it
//     (those commands change what it will hold). It is judged at each write of its state:
//     a heartbeat, an ack and a new task each mark the device changed.
//   - A failed write leaves the device changed; the writer retries it after
//     WriteInterval by itself (no later touch is needed).
//   - A refusal (the store answered with an error: a fencing token on the key, a full
//     store, a key rule) is counted by reason in faceagent_store_write_refused_total,
//     warned about at most once a minute, and named by RefusedWarnings until a write of
//     that device succeeds. Other failures (the store away) are logged at debug only:
//     they end by themselves.
//
// # Caveats
//
//   - Only a device turning changed wakes the writer; one already changed waits for the
//     writer's next round (its WriteInterval timer, or the write in progress).
//   - Each round scans every device: fine for the tens to hundreds of terminals of one
//     gateway.
package devstate
