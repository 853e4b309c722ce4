// Package release holds the tests of what ships rather than of a Go package: the systemd
// unit (configs/faceagent.service), the daemon's side of it (READY=1, WATCHDOG=1 keepalives,
// STOPPING=1 over a real notify socket), and the armv7 smoke test, in which the cross-compiled
// faceagent runs under qemu-user with a broker-only config and answers a state store SET and
// GET from tools/sscli, and every board's faceagent runs on the board's emulated core.
//
// # Running
//
//	go test ./test/release   # unit checks; the smoke test skips
//	make smoke-arm           # FACEAGENT_ARM_SMOKE=1: the smoke test too
//
// # Caveats
//
//   - The smoke test needs qemu-user-static (qemu-arm-static) and builds two binaries, so it
//     only runs when FACEAGENT_ARM_SMOKE is set (make smoke-arm, part of make test-arm).
//   - While agent/cmd/faceagent or tools/sscli has no Go files it skips and says which is
//     missing; once both exist it fails on any problem.
//   - systemd-analyze verify runs only where systemd-analyze is installed; its warnings count
//     as failures (verify exits 0 on unknown keys).
package release
