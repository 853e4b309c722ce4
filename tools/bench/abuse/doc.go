// Package abuse measures the released faceagent daemon under clients that abuse its embedded
// broker and state store, against the worst case their bounds allow (docs/benchmarks.md,
// "Worst-case memory of the broker's bounds"; WorstCase here computes the same formula).
//
// The test builds faceagent as released (static, stripped) and starts it with its default
// [broker] bounds, one simulated terminal (device/sim) and a back office that submits a task
// every 25 ms. The state store's abusers come first (store_test.go), speaking the protocol
// as the SDKs do (RESP3 requests published QoS 1 on the invoke topic with a response topic
// and correlation data): fillers SET new keys of store_max_key_size with values of
// store_max_value_size, halving the value on "quota exceeded" until even an empty one is
// refused, and keep the store full to store_max_bytes for the whole run; watchers (kept
// sessions, Receive Maximum 65535) register store_max_notify keys each, keys that do not
// exist but for one the churner changes as fast as the broker takes the requests (half of
// the watchers a one-byte key with an empty value, whose notifications are ~1 KB packets
// counted as one byte, half a key whose value fills one connection's
// max_pending_write_bytes), read everything and acknowledge none of their notifications;
// disconnected when their notifications overflow or stall, they connect and register again.
//
// Once the store is full come the MQTT abusers: each keeps a session (expiry one hour),
// subscribes to '#' and to max_subscriptions deep filters of its own, and publishes QoS 1
// messages (every tenth retained) as fast as the broker takes them, never reading after its
// CONNACK. Every message goes to every abuser: their queues, sessions, the total, the
// retained messages and the budget of large packets being read fill up to their bounds.
// A third of the way through, each abuser leaves (its session stays, holding what was
// queued) and a new one takes its place, so kept sessions pile up to max_clients.
//
// It samples the daemon's resident set (/proc/PID/status) and the store's size (/metrics),
// and asserts that its peak (VmHWM) and its live heap (GODEBUG=gctrace=1) stay under the
// stated worst case and that the terminal kept getting commands: results kept reaching the
// back office, never more than 5 s apart.
//
//	go test -run TestAbusiveClients -v ./tools/bench/abuse/              # short: 8 abusers, 4 watchers, 6 s
//	FACEAGENT_ABUSE_LONG=1 go test -run TestAbusiveClients -v -timeout 15m ./tools/bench/abuse/
//	make bench-abuse                                                       # the long one
//
// FACEAGENT_ABUSE_TREE=/path/to/another/checkout runs that tree's daemon instead (the worst
// case asserted stays this tree's), to compare releases; FACEAGENT_ABUSE_WATCHERS=n sets the
// number of watchers.
//
// The long run: 64 abusers and 16 watchers (two fillers, one churner) for 60 s, messages of
// 256 KiB and, every eighth, 1 MiB. Loopback only; everything lives in a temporary
// directory.
package abuse
