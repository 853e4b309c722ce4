// Package agent wires faceagent together: the configuration, the embedded broker and
// state store, and — as those packages land — the upstream link, the outbox, the device
// links and the device-state writer. It owns start-up order, supervision and shutdown.
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
// Run starts the parts in order (broker, metrics endpoint, …), closes Ready, waits for
// ctx, then stops the parts in reverse within agent.shutdown_timeout. Reload applies what
// can change live from a re-read file ([log] level, [dispatch], [store]) and names the
// sections that need a restart (ErrNeedsRestart).
//
// /metrics (Prometheus text, package agent/metrics) and /healthz are served on
// metrics.listen when it is set.
//
// # Caveats
//
//   - This build runs the embedded broker and state store alone (a config with nothing but
//     [broker]); any other config makes Run return ErrNotWired. The intake hook, outbox,
//     device links, reports and device state are wired as their packages land (issue 7).
//   - The broker's client quotas (max_clients, max_packet_size, receive_maximum,
//     max_queued_messages) are set on mochi's capabilities after broker.New, because
//     agent/broker.Options has no fields for them yet.
//   - GOMEMLIMIT in the environment wins over agent.gomemlimit.
package agent
