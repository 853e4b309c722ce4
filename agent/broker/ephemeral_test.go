package broker

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
)

func TestSessionEndsWithConnection(t *testing.T) {
	for _, c := range []struct {
		name    string
		version byte
		clean   bool
		expiry  uint32
		want    bool
	}{
		{"3.1.1 clean session", 4, true, 0, true},
		{"3.1.1 persistent session", 4, false, 0, false},
		{"5 clean start, expiry 0", 5, true, 0, true},
		{"5 clean start, expiry 1h: kept after disconnect", 5, true, 3600, false},
		{"5 resumed, expiry 0: may hold restored messages", 5, false, 0, false},
		{"5 resumed, expiry 1h", 5, false, 3600, false},
	} {
		cl := &mqtt.Client{}
		cl.Properties.ProtocolVersion = c.version
		cl.Properties.Clean = c.clean
		cl.Properties.Props.SessionExpiryInterval = c.expiry
		if got := sessionEndsWithConnection(cl); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
