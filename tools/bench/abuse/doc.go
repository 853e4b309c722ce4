// Package abuse measures the released faceagent daemon under clients that abuse its embedded
// broker, against the worst case its bounds allow (docs/benchmarks.md, "Worst-case memory
// of the broker's bounds"; WorstCase here computes the same formula).
//
// The test builds faceagent as released (static, stripped) and starts it with its default
// [broker] bounds, one simulated terminal (device/sim) and a back office that submits a task
// every 25 ms, then connects abusive clients: each keeps a session (expiry one hour),
// subscribes to '#' and to max_subscriptions deep filters of its own, and publishes QoS 1
// messages (every tenth retained) as fast as the broker takes them, never reading after its
// CONNACK. Every message goes to every abuser: their queues, sessions, the total, the
// retained messages and the budget of large packets being read fill up to their bounds.
// A third of the way through, each abuser leaves (its session stays, holding what was
// queued) and a new one takes its place, so kept sessions pile up to max_clients.
//
// It samples the daemon's resident set (/proc/PID/status) and asserts that its peak
// (VmHWM) stays under the stated worst case and that the terminal kept getting commands:
// results kept reaching the back office, never more than 5 s apart.
//
//	go test -run TestAbusiveClients -v ./tools/bench/abuse/              # short: 8 abusers, 6 s
//	FACEAGENT_ABUSE_LONG=1 go test -run TestAbusiveClients -v -timeout 15m ./tools/bench/abuse/
//	make bench-abuse                                                       # the long one
//
// FACEAGENT_ABUSE_TREE=/path/to/another/checkout runs that tree's daemon instead (the worst
// case asserted stays this tree's), to compare releases.
//
// The long run: 64 abusers for 60 s, messages of 256 KiB and, every eighth, 1 MiB. Loopback
// only; everything lives in a temporary directory.
package abuse
