// Package testutil holds helpers shared by the tests of several packages: free loopback
// ports and a Debian mosquitto broker started on one. It is imported only from _test.go
// files.
package testutil
