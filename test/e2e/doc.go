// Package e2e holds the tests of the whole daemon: an agent.New + Run in the test's
// process (or a child process for the crash tests), driven and observed only from outside,
// as a deployment sees it. Back offices and terminals are MQTT clients on the embedded
// broker's address (simulated terminals from device/sim, raw MQTT clients where a test
// must decide when a client reads), the state store is read through agent/store, and the
// agent's inner state is read from /metrics over HTTP (scrapeValue parses the Prometheus
// text format), never from its fields. Where a test needs more, it uses a part's exported
// API and says so: the forward log a stopped agent left is opened with agent/report, and the
// benchmarks' ceiling rig runs agent/broker without the agent.
//
// # Running
//
//	go test -race ./test/e2e                 # every test (mosquitto-based ones skip without it)
//	go test -count=1 -run TestHeartbeatsKeepReaderStacksSmall ./test/e2e   # the no-race test
//	go test -run '^$' -bench Throughput -benchtime 3x ./test/e2e           # the daemon benchmarks
//
// # Invariants of the harness
//
//   - Every agent gets [metrics] on a free loopback port (startAgent sets it when the
//     config has none), so every test can read its series.
//   - Waits are on events (a message arriving, a store notification) or, where nothing
//     announces a change, on a metric polled with a deadline; never a bare sleep.
//   - The crash tests run the agent in a child process (internal/testutil) killed with
//     SIGKILL, on real files with real fsync.
//   - TestWhitelistSyncProperty draws tasks, terminal faults and agent restarts from a
//     seed and checks the terminals against a model of the tasks; a failure prints the
//     seed and its steps, `-args -wlprop.seed=N` (or FACEAGENT_WLPROP_SEED) replays it,
//     FACEAGENT_SOAK=1 (`make soak`) runs many more and longer seeds.
//   - TestDaemonSoak runs the agent (a child process) under a paced mix of tasks and
//     terminal faults with one SIGKILL, sampling its RSS, descriptors, goroutines, heap,
//     queues and data_dir; it checks every task's outcome, every terminal's list, and that
//     the resources come back to an idle baseline and do not grow. 45 s of load in `make
//     test`; FACEAGENT_SOAK=1 (`make soak`) runs FACEAGENT_SOAK_DURATION (20m), the samples
//     as CSV in FACEAGENT_SOAK_OUT, FACEAGENT_SOAK_SEED replays a run's draws.
//
// # Caveats
//
//   - Tests that measure what the race detector changes (stack sizes) skip under -race;
//     `make unit-norace` runs them in a plain build.
//   - Tests with an external upstream broker need mosquitto (internal/testutil.StartMosquitto
//     says how it is found) and skip without it.
package e2e
