// Package attack is faceagent's attack suite: it attacks a live agent while the agent
// keeps serving, and checks afterwards that serving went on and that the agent's
// resources stayed within bounds stated from its configuration. It is black-box: the
// tests build the real binary (agent/cmd/faceagent, without the race detector: its
// memory and descriptors are what is measured), write a config, and start it as a child
// process on free 127.0.0.1 ports with data_dir under the test's temporary directory.
// The package has no code besides this comment; everything is in its tests.
//
// # Running
//
//	go test ./test/attack                          # the short form (part of make test)
//	go test -run 'TestAttacks/users' -v ./test/attack
//	make attack                                     # the long form: FACEAGENT_ATTACK_LONG=1
//
// The short form takes about a minute (two under the race detector) on 2 cores; the long
// form runs every attack tens of times more (scale) and takes several minutes.
//
// # What runs while the agent is attacked
//
// Two simulated terminals (device/sim, strict: a second command while one is unacked is a
// violation) on the broker, with user names, passwords and client certificates where the
// setup wants them; a back office with a kept session (expiry one hour, resumed after a
// lost connection) that submits a task every 20 ms and collects results and deadletters;
// and a monitor that samples the agent every 20 ms: VmRSS (/proc/PID/status), open
// descriptors (/proc/PID/fd), the bytes of data_dir's files, the bytes the agent wrote
// to stdout and stderr, and how long the terminals went without a command and the back
// office without a result. Each attack runs inside a window of the monitor; the peaks of
// the window are checked against the bounds (attacks_test.go: checkBounds):
//
//   - RSS under agent.gomemlimit (48 MiB) plus the size of the binary, and, where an
//     attack pushes at a configured byte bound, a growth under twice that bound plus
//     16 MiB;
//   - descriptors under those open once serving, plus the connections the attack holds,
//     plus 16; never over RLIMIT_NOFILE;
//   - data_dir growth under 4 MiB plus 128 KiB a second of attack (the traffic's journal
//     records), plus what the attack may store by its bounds;
//   - log growth under 16 KiB plus the attack's budget;
//   - no silence over 5 s: commands to the terminals and results to the back office go on
//     during the attack;
//   - after it, the terminals get commands again and every task the agent acknowledged
//     has its result, within 20 s; no strict-mode violation; the agent still runs, and
//     stops cleanly on SIGTERM at the end.
//
// # Setups and attacks
//
// TestAttacks runs the attacks that hold against one live agent per setup: anonymous
// clients allowed (the default); a users file with anonymous clients refused; the same
// with mutual TLS; data_dir on a 20 MiB tmpfs; RLIMIT_NOFILE 512. The attacks: malformed
// RESP3 requests, forbidden response topics, the users file's topic and key rules,
// malformed MQTT packets, bad tasks, bad terminal input, a flood of refused logins, TLS
// without a good client certificate, slowloris, and the disk filling up under the task
// journal (the agent refuses tasks with PUBACK 0x83 and /healthz 503; once space is back
// it is restarted, as systemd does, and loses nothing it acknowledged). A new attack is a
// row of the table in attacks_test.go: a function, its setups and its budgets.
//
// One TestAttack* function per finding that did not hold when the suite was written:
// accept(2) failing with EMFILE, another user taking over the back office's session,
// payloads and passwords in the log, a subscriber that stops reading, the sessions
// journal after a full disk, a foreign fencing token on the agent's keys, a KEYNOTIFY
// watcher that never acknowledges, a response topic under another client's hex alias;
// and the byte bounds (bounds_test.go): state store bytes and key size, KEYNOTIFY
// registrations, subscriptions, pending writes, retained messages, offline queues,
// connections before CONNECT, the server keepalive.
//
// # Caveats
//
//   - Linux only: /proc, prlimit(1) for RLIMIT_NOFILE (the agent must not raise it: Go
//     raises the soft limit to the hard one, so both are set), unshare(1) and nsenter(1)
//     for the tmpfs (a user and mount namespace of the test's own, unprivileged; every
//     run of the agent enters it, so data_dir survives a restart). Without them the
//     tests that need them skip and say so.
//   - The bounds are about the agent, not the machine: a loaded machine lengthens
//     silences (5 s is far over the stalls seen with 8 builds on 2 cores) but not peaks.
//   - The monitor samples every 20 ms: a peak shorter than that can be missed.
//   - The broker's connect timeout (10 s) has no config key, so slowloris lasts 10 s.
package attack
