package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestWedgedTerminalsCloseTogether: Close disconnects the listener's clients side by side.
// Each wedged terminal's DISCONNECT waits its grace (0.5 s, third_party/mochi: "wedged
// peer") before the client is stopped without it; one after another, six of them held
// Close for 3 s. Together they take one grace: Close returns well within 2 s, even under
// -race on a loaded machine.
func TestWedgedTerminalsCloseTogether(t *testing.T) {
	const wedged = 6
	const bound = 2 * time.Second // one after another: at least 6 × 0.5 s
	b := startBroker(t, wedgeOptions())
	healthy := memConnect(t, b.Addr(), "healthy")
	defer healthy.close()
	for i := range wedged {
		id := fmt.Sprintf("stuck%d", i)
		wedgedTerminal(t, b.Addr(), id)
		wedge(t, b, id)
	}

	start := time.Now()
	closeWithin(t, b, bound, fmt.Sprintf("with %d wedged terminals", wedged))
	t.Logf("Close with %d wedged terminals: %v", wedged, time.Since(start).Round(time.Millisecond))
	expectWithin(t, healthy, packets.Disconnect, "the healthy terminal's DISCONNECT")
}

// TestCloseDisconnectsMoreClientsThanAtOnce: with more clients than Close disconnects at
// once (closeConcurrency), every one still gets its DISCONNECT, and Close returns.
func TestCloseDisconnectsMoreClientsThanAtOnce(t *testing.T) {
	b := startBroker(t, Options{TerminalTopic: isCommandTopic})
	clients := make([]*memClient, closeConcurrency+8)
	for i := range clients {
		clients[i] = memConnect(t, b.Addr(), fmt.Sprintf("t%03d", i))
		defer clients[i].close()
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		body := expectWithin(t, c, packets.Disconnect, fmt.Sprintf("client %d's DISCONNECT", i))
		if len(body) < 1 || body[0] != packets.ErrServerShuttingDown.Code {
			t.Fatalf("client %d: DISCONNECT % x, want reason 0x%02x", i, body, packets.ErrServerShuttingDown.Code)
		}
	}
}
