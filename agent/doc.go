// Package agent wires faceagent together. It holds no concern of its own: it maps the
// configuration onto each part's options, starts the parts in order, stops them in
// reverse, registers their metrics, serves /metrics and /healthz, and answers the
// supervisor (Healthy, NeedsRestart, Reload). docs/design.md ("Architecture") follows one
// task through the parts by package name.
//
// # Tutorial
//
//	cfg, err := config.Load("/etc/faceagent/agent.toml", nil)
//	if err != nil { … } // exit 2
//	log, level := agent.NewLogger(cfg.Log, os.Stderr)
//	agent.ApplyMemoryLimit(cfg.Agent)
//	a, err := agent.New(&agent.Options{Config: cfg, Logger: log, LogLevel: level, Version: version})
//	if err != nil { … }
//	go func() { <-a.Ready(); /* sd_notify READY=1 */ }()
//	err = a.Run(ctx) // blocks; cancel ctx for a clean stop
//
// # The parts
//
//   - agent/broker: the embedded MQTT 5 broker and its state store; it hands the tasks topic
//     to intake (Intercept), carries the reports (Publisher) and the MQTT terminals' bus.
//   - agent/intake: tasks in, from the broker, the upstream connection or HTTP pull;
//     parsed by agent/wire, journalled by agent/outbox before they are acknowledged,
//     refused ones to the deadletter log.
//   - agent/outbox: the durable local message table: one command in flight per terminal.
//   - agent/links: the terminal links (device/mqttlink, device/serial); commands out,
//     events in.
//   - agent/report on agent/backlog: results, deadletters, forwarded acks and heartbeats,
//     published in order (agent/publish) through the broker or agent/upstream.
//   - agent/devstate and agent/remote: terminal state, remote config and control in the
//     state store, through agent/kv.
//   - agent/whitelist and agent/faces: the terminals' desired whitelists, and the faces
//     their persons carry (data_dir/faces), each held by the intake until its record is
//     durable and swept once no desired record refers to it (facestore.go).
//   - agent/ui: the operator's page ([ui] listen): the state page.go builds from the parts,
//     live over server-sent events, its actions through remote's Execute.
//
// # What holds
//
//   - Start order: broker (not listening), forward log, links, outbox (journal replay),
//     deadletter log, intake, the report streams, device state and the links' event
//     pumps, remote, broker listening, /metrics. So no task is acknowledged before the
//     outbox can take it, and the results a crash left unreported are published as soon
//     as the broker serves.
//   - Stop order is the reverse, within agent.shutdown_timeout: intake refuses new tasks
//     first, the journals are flushed after the last event was recorded.
//   - /healthz answers 503 with the reason while a part is unsound: a journal refused a
//     write (outbox, deadletter log, sync report log), the embedded broker cannot accept
//     connections, or its sessions journal refuses writes (a full disk). NeedsRestart is
//     the subset a restart mends; the systemd watchdog asks it. Warnings (terminals whose
//     state the store refuses) are listed under "ok".
//   - Reload applies what can change live ([log] level, [dispatch], [store], terminals'
//     settings) with the remote override laid over it again, and names the sections that
//     need a restart (ErrNeedsRestart).
//
// docs/operations.md has the resource bounds (memory, disk per journal) and the metrics;
// docs/design.md the delivery semantics and their limits.
package agent
