package main

import (
	"fmt"
	"log/slog"

	agentbroker "github.com/seed0e69bba5/faceagent/agent/broker"
)

// broker is the embedded broker facesim starts when no -url is given, so that an agent (or
// mqttlink) can be pointed at it: the agent's own embedded broker, with anonymous clients
// allowed everything and no bound on the number of clients (a fleet may be large).
type broker struct {
	b    *agentbroker.Broker
	addr string
}

func startBroker(listen string, logger *slog.Logger) (*broker, error) {
	b, err := agentbroker.New(&agentbroker.Options{Listen: listen, AllowAnonymous: true, MaxClients: -1, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	// Start binds, so that port 0 resolves and a busy port fails here, clearly.
	if err := b.Start(); err != nil {
		b.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return &broker{b: b, addr: b.Addr()}, nil
}

func (b *broker) Close() error { return b.b.Close() }
