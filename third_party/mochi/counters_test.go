// faceagent patch (counter drift): the byte counters of the bounds come back to nothing on
// the paths that end what they count.

package mqtt

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// failingConnack is a ConnackWaiter that cannot store any session.
type failingConnack struct{ HookBase }

func (failingConnack) ID() string                      { return "failing-connack" }
func (failingConnack) WaitBeforeConnack(*Client) error { return errors.New("disk full") }

// A CONNECT of a kept session with a will, refused because its session could not be stored
// (ConnackWaiter), leaves nothing counted: the will counted in the session's bytes
// (willRoom) goes with the refused connection. Before, it stayed in the server's total for
// good: each such refusal (a full disk, one per reconnect attempt) took the will's bytes
// from MaximumQueuedBytes.
func TestRefusedConnectReleasesItsWill(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumQueuedBytes = 1 << 20 })
	if err := s.AddHook(new(failingConnack), nil); err != nil {
		t.Fatal(err)
	}
	for _, clean := range []bool{false, true} {
		srv, cli := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- s.EstablishConnection("pipe", srv) }()
		pk := connectPacket(5, "", "")
		pk.Connect.Clean = clean
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 3600, true
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "will", make([]byte, 1000)
		writePacket(t, cli, pk)
		if code := readConnack(t, cli, bufio.NewReader(cli)); code != packets.ErrServerUnavailable.Code {
			t.Fatalf("clean %v: CONNACK %#x, want 0x88", clean, code)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the refused connection did not end")
		}
		_ = cli.Close()
		if n := s.QueuedBytes(); n != 0 {
			t.Fatalf("clean %v: %d bytes still counted after the refused CONNECT", clean, n)
		}
	}
}
