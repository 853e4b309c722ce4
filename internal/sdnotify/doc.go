// Package sdnotify implements the service side of systemd's notify protocol (sd_notify(3)):
// newline-separated "KEY=VALUE" assignments in one datagram on the unix socket named by
// $NOTIFY_SOCKET. It is the few lines the faceagent unit (Type=notify, WatchdogSec=) needs,
// without cgo or libsystemd.
//
// # Tutorial
//
//	n, err := sdnotify.FromEnv() // nil outside systemd: every method is then a no-op
//	if err != nil {
//		return err
//	}
//	// ... open the journal, start the broker ...
//	_ = n.Ready()
//	if every, ok := sdnotify.WatchdogInterval(); ok {
//		go n.RunWatchdog(ctx, every, agent.Healthy) // WATCHDOG=1 every every/2 while healthy
//	}
//	<-ctx.Done()
//	_ = n.Stopping()
//
// # Caveats
//
//   - Abstract sockets ("@name") and paths are supported; "vsock:" sockets are not
//     (ErrUnsupportedSocket).
//   - The unit's NotifyAccess defaults to "main": only the main process may notify. Do not send
//     from a child process.
//   - The environment is left as it is; a daemon that starts children which must not notify
//     should unset NOTIFY_SOCKET for them.
//   - Linux only in practice; elsewhere NOTIFY_SOCKET is never set and a nil Notifier results.
package sdnotify
