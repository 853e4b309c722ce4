package agent

import (
	"log/slog"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// upstreamOptions maps [upstream] onto the upstream connection's options; tasks taken from
// it go to tasks. The caller sets Connected and Events.
func upstreamOptions(cfg *config.Config, tasks upstream.Tasks, m *agentMetrics, log *slog.Logger) *upstream.Options {
	u := cfg.Upstream
	return &upstream.Options{
		URL:      u.URL,
		ClientID: clientID(cfg),
		TLS: upstream.TLSOptions{CAFile: u.TLSCA, CertFile: u.TLSCert, KeyFile: u.TLSKey,
			ServerName: u.TLSServerName},
		Username:       u.Username,
		Password:       []byte(u.Password),
		KeepAlive:      u.KeepAlive.Duration,
		ConnectTimeout: u.ConnectTimeout.Duration,
		SessionExpiry:  u.SessionExpiry.Duration,
		ReconnectMax:   u.ReconnectMax.Duration,
		PublishWindow:  u.PublishWindow,
		TasksTopic:     wire.GatewayTopics(cfg.Agent.GatewayID).Tasks,
		Tasks:          tasks,
		Metrics:        m.upstream,
		Logger:         log,
	}
}

// clientID is upstream.client_id or "faceagent-{gw}".
func clientID(cfg *config.Config) string {
	if cfg.Upstream.ClientID != "" {
		return cfg.Upstream.ClientID
	}
	return "faceagent-" + cfg.Agent.GatewayID
}
