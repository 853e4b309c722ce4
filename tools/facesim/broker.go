package main

import (
	"fmt"
	"log/slog"
	"net"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// broker is the embedded mochi broker facesim starts when no -url is given, so that an
// agent (or mqttlink) can be pointed at it.
type broker struct {
	srv  *mqtt.Server
	addr string
}

// allowAll admits every client to every topic: the embedded broker is for local testing.
type allowAll struct{ mqtt.HookBase }

func (allowAll) ID() string { return "facesim-allow-all" }
func (allowAll) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}
func (allowAll) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (allowAll) OnACLCheck(*mqtt.Client, string, bool) bool              { return true }

func startBroker(listen string, logger *slog.Logger) (*broker, error) {
	// Bind first so that port 0 resolves and a busy port fails here, clearly.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	addr := ln.Addr().String()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: logger})
	srv.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck = true
	if err := srv.AddHook(new(allowAll), nil); err != nil {
		ln.Close()
		return nil, err
	}
	if err := srv.AddListener(listeners.NewNet("facesim", ln)); err != nil {
		ln.Close()
		return nil, err
	}
	if err := srv.Serve(); err != nil {
		srv.Close()
		return nil, err
	}
	return &broker{srv: srv, addr: addr}, nil
}

func (b *broker) Close() error { return b.srv.Close() }
