package mqtt

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Tests of faceagent's patches that need only the server package (the rest are in
// agent/broker, which runs the whole broker).

// refusingHook refuses every client in OnConnectAuthenticate.
type refusingHook struct{ HookBase }

func (h *refusingHook) ID() string                                         { return "test-refuse" }
func (h *refusingHook) Provides(b byte) bool                               { return b == OnConnectAuthenticate }
func (h *refusingHook) OnConnectAuthenticate(*Client, packets.Packet) bool { return false }

// codeHook answers every client with code (a ConnectAuthenticator); it provides no hook
// method, and its OnConnectAuthenticate would let everyone in: the server must not ask it.
type codeHook struct {
	HookBase
	code packets.Code
}

func (h *codeHook) ID() string                                               { return "test-refuse-code" }
func (h *codeHook) OnConnectAuthenticate(*Client, packets.Packet) bool       { return true }
func (h *codeHook) AuthenticateConnect(*Client, packets.Packet) packets.Code { return h.code }

// safeBuffer is a log sink written by the server's goroutines and read by the test.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pipeServer returns a server with hooks and a client end of a connection it serves.
func pipeServer(t *testing.T, log io.Writer, hooks ...Hook) (net.Conn, <-chan error) {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	s := New(&Options{Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, h := range hooks {
		if err := s.AddHook(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	client, server := net.Pipe()
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		done <- s.EstablishConnection("pipe", server)
		close(ended)
	}()
	t.Cleanup(func() {
		_ = client.Close()
		<-ended
		_ = s.Close()
	})
	return client, done
}

func writePacket(t *testing.T, c net.Conn, pk packets.Packet) {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// readConnack reads a CONNACK from r and returns its reason code.
func readConnack(t *testing.T, c net.Conn, r *bufio.Reader) byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 4) // type, length, flags, reason
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	if head[0]>>4 != packets.Connack {
		t.Fatalf("got packet type %d, want CONNACK", head[0]>>4)
	}
	return head[3]
}

func connectPacket(version byte, user, password string) packets.Packet {
	return packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60,
			ClientIdentifier: "c1", Username: []byte(user), UsernameFlag: user != "",
			Password: []byte(password), PasswordFlag: password != ""},
	}
}

// TestRefuseConnectCode: a ConnectAuthenticator refusing a client picks the CONNACK's
// reason code, mapped to the 3.1.1 return code for a 3.1.1 client; a refusal through
// OnConnectAuthenticate, or with a code that is no CONNACK error, stays 0x86 (0x05 for
// 3.1.1); a client any hook lets in is let in.
func TestRefuseConnectCode(t *testing.T) {
	allow := new(allowHook)
	for _, tc := range []struct {
		name    string
		hooks   []Hook
		version byte
		want    byte
	}{
		{"client id", []Hook{&codeHook{code: packets.ErrClientIdentifierNotValid}}, 5, 0x85},
		{"client id, 3.1.1", []Hook{&codeHook{code: packets.ErrClientIdentifierNotValid}}, 4, 0x02},
		{"not authorized", []Hook{&codeHook{code: packets.ErrNotAuthorized}}, 5, 0x87},
		{"OnConnectAuthenticate", []Hook{new(refusingHook)}, 5, 0x86},
		{"OnConnectAuthenticate, 3.1.1", []Hook{new(refusingHook)}, 4, 0x05},
		{"no CONNACK error", []Hook{&codeHook{code: packets.CodeGrantedQos1}}, 5, 0x86},
		{"first code chosen", []Hook{new(refusingHook), &codeHook{code: packets.ErrBanned}, &codeHook{code: packets.ErrNotAuthorized}}, 5, 0x8a},
		{"let in by another hook", []Hook{&codeHook{code: packets.ErrNotAuthorized}, allow}, 5, 0},
		{"let in by its code", []Hook{&codeHook{code: packets.CodeSuccess}}, 5, 0},
	} {
		c, done := pipeServer(t, nil, tc.hooks...)
		r := bufio.NewReader(c)
		writePacket(t, c, connectPacket(tc.version, "", ""))
		if got := readConnack(t, c, r); got != tc.want {
			t.Errorf("%s, MQTT version %d: CONNACK %#x, want %#x", tc.name, tc.version, got, tc.want)
		}
		if tc.want == 0 {
			_ = c.Close()
			continue
		}
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: connection accepted", tc.name)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("refused connection still served")
		}
	}
}

// TestLogsCarryNoPacketContents: a second CONNECT is a protocol error that upstream mochi
// logged with the whole packet, password included, and a PUBLISH an OnPublish hook refuses
// was logged with its payload as decimal bytes. The lines now say the packet's type and
// sizes only.
func TestLogsCarryNoPacketContents(t *testing.T) {
	var log safeBuffer
	c, done := pipeServer(t, &log, &allowHook{}, &refusePublish{})
	r := bufio.NewReader(c)
	writePacket(t, c, connectPacket(5, "", ""))
	if got := readConnack(t, c, r); got != 0 {
		t.Fatalf("CONNACK %#x", got)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }() // PUBACKs, the DISCONNECT
	payload := bytes.Repeat([]byte("Z"), 4096)
	writePacket(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		ProtocolVersion: 5, PacketID: 7, TopicName: "secret/topic-name", Payload: payload})
	writePacket(t, c, connectPacket(5, "mallory", "hunter2-password"))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a second CONNECT did not end the connection")
	}
	got := log.String()
	t.Logf("%d bytes of log", len(got))
	// %v prints a []byte as decimal bytes: "hunter2" is "104 117 110 116 101 114 50".
	for _, secret := range []string{"hunter2-password", "104 117 110 116 101 114 50", "ZZZZ", "90 90 90", "secret/topic-name"} {
		if strings.Contains(got, secret) {
			t.Errorf("log holds %q:\n%.2000s", secret, got)
		}
	}
	for _, want := range []string{"packet.type=Connect", "packet.type=Publish", "packet.payload_bytes=4096", "client=c1"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%.2000s", want, got)
		}
	}
	if len(got) > 4096 {
		t.Errorf("%d bytes of log for two refused packets:\n%.2000s", len(got), got)
	}
}

// allowHook lets every client in.
type allowHook struct{ HookBase }

func (h *allowHook) ID() string                                         { return "test-allow" }
func (h *allowHook) Provides(b byte) bool                               { return b == OnConnectAuthenticate || b == OnACLCheck }
func (h *allowHook) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *allowHook) OnACLCheck(*Client, string, bool) bool              { return true }

// refusePublish fails every PUBLISH in OnPublish with an error mochi logs.
type refusePublish struct{ HookBase }

func (h *refusePublish) ID() string           { return "test-refuse-publish" }
func (h *refusePublish) Provides(b byte) bool { return b == OnPublish }
func (h *refusePublish) OnPublish(_ *Client, pk packets.Packet) (packets.Packet, error) {
	return pk, packets.ErrNotAuthorized
}
