package store

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/url"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// Options configure a Client. The zero value of every field means its default; Connect
// accepts nil for all defaults (anonymous, mqtt://127.0.0.1:1883).
type Options struct {
	// URL of the MQTT broker: mqtt://host:port, mqtts:// or tls:// for TLS. Default
	// mqtt://127.0.0.1:1883.
	URL string
	// ClientID is the MQTT client id; it names the response and notification topics, so it
	// must be unique among the store's clients. Default: "faceagent-" + 8 random hex digits.
	ClientID string
	// TLS configures mqtts:// connections (CA pool, client certificate).
	TLS *tls.Config
	// Username and Password for the CONNECT packet; empty means none.
	Username string
	Password []byte

	// Timeout is the default per-request timeout; it also sets each request's Message Expiry
	// (rounded up to whole seconds). Default 10s. A context deadline that comes sooner wins.
	Timeout time.Duration
	// ConnectTimeout bounds one connection attempt (TCP, TLS, CONNECT/CONNACK). Default 10s.
	ConnectTimeout time.Duration
	// KeepAlive in seconds. Default 30.
	KeepAlive uint16
	// ReconnectMin and ReconnectMax bound the delay between connection attempts; the delay
	// grows exponentially from ReconnectMin and is randomised (full jitter) so a fleet does not
	// reconnect in step. Defaults 100ms and 10s.
	ReconnectMin, ReconnectMax time.Duration

	// WatchBuffer bounds the notifications each Watch holds for a reader that falls behind;
	// past it the oldest are dropped and the next one delivered is marked Resync. Default
	// 1024.
	WatchBuffer int

	// Clock stamps every request's __ts and observes every response's __ts. Share one clock
	// between the clients of a process. Default: a new clock named after ClientID.
	Clock *hlc.Clock
	// Logger receives connection events. Default: discard.
	Logger *slog.Logger
}

const (
	defaultURL            = "mqtt://127.0.0.1:1883"
	defaultTimeout        = 10 * time.Second
	defaultConnectTimeout = 10 * time.Second
	defaultKeepAlive      = 30
	defaultReconnectMin   = 100 * time.Millisecond
	defaultReconnectMax   = 10 * time.Second
	defaultWatchBuffer    = 1024
)

// withDefaults returns a filled-in copy; the caller's struct is never modified.
func (o *Options) withDefaults() (Options, *url.URL, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.URL == "" {
		c.URL = defaultURL
	}
	u, err := parseURL(c.URL)
	if err != nil {
		return c, nil, err
	}
	if c.ClientID == "" {
		c.ClientID = "faceagent-" + randomHex(4)
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = defaultKeepAlive
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = defaultReconnectMin
	}
	if c.ReconnectMax <= c.ReconnectMin {
		c.ReconnectMax = max(defaultReconnectMax, 2*c.ReconnectMin)
	}
	if c.WatchBuffer <= 0 {
		c.WatchBuffer = defaultWatchBuffer
	}
	if c.Clock == nil {
		c.Clock = hlc.NewClock(c.ClientID)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, u, nil
}
