// Package testutil holds helpers shared by the tests of several packages: free loopback
// ports, a Debian mosquitto broker started on one, the re-exec-and-SIGKILL harness of the
// crash tests (CrashChild), a small real filesystem to fill up (SmallFS, FillFS), what a
// directory occupies (DirDiskBytes, DirFileBytes), a CA that issues certificates for TLS
// tests (NewCA), a buffer goroutines write while the test reads it (SyncBuffer), a TCP
// proxy that delays an MQTT link and counts the messages in flight on it (DelayProxy), and a
// subscriber that keeps what it receives in order (OrderSubscriber). It is imported only
// from _test.go files.
package testutil
