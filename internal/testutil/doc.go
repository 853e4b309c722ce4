// Package testutil holds helpers shared by the tests of several packages: free loopback
// ports, a Debian mosquitto broker started on one, the re-exec-and-SIGKILL harness of the
// crash tests (CrashChild), a small real filesystem to fill up (SmallFS, FillFS), what a
// directory occupies (DirDiskBytes, DirFileBytes), a CA that issues certificates for TLS
// tests (NewCA), and a buffer goroutines write while the test reads it (SyncBuffer). It
// is imported only from _test.go files.
package testutil
