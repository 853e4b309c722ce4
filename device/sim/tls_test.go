package sim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// credentials records the user name and password of every CONNECT and lets in only
// user "terminal-{id}" with password "pw".
type credentials struct {
	mqtt.HookBase
	mu   sync.Mutex
	seen []string
}

func (*credentials) ID() string { return "credentials" }
func (*credentials) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}
func (h *credentials) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	h.mu.Lock()
	h.seen = append(h.seen, string(pk.Connect.Username)+":"+string(pk.Connect.Password))
	h.mu.Unlock()
	return string(pk.Connect.Username) == "terminal-"+cl.ID[len("facesim-"):] && string(pk.Connect.Password) == "pw"
}
func (*credentials) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

// A terminal with Options.Username ("{id}" replaced), Password and TLS connects to a broker
// that wants both a client certificate and credentials, and takes a command.
func TestMQTTTerminalWithCredentialsOverMutualTLS(t *testing.T) {
	serverCert, clientCert, pool := testCertificates(t)
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	auth := new(credentials)
	if err := srv.AddHook(auth, nil); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tls", Address: addr, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}})); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	l, err := mqttlink.New(mqttlink.Config{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	f, err := StartMQTT("mqtts://"+addr, []string{"t7"}, strict(t, Options{Seed: 1,
		Username: "terminal-{id}", Password: []byte("pw"),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		auth.mu.Lock()
		defer auth.mu.Unlock()
		t.Fatalf("terminal not ready: %v (CONNECTs seen: %q)", err, auth.seen)
	}
	if err := l.Send(ctx, "t7", face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "951"}}); err != nil {
		t.Fatal(err)
	}
	for len(f.Terminal("t7").Persons()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the command never reached the terminal")
		case <-time.After(5 * time.Millisecond):
		}
	}
	auth.mu.Lock()
	defer auth.mu.Unlock()
	if auth.seen[0] != "terminal-t7:pw" {
		t.Fatalf("CONNECT credentials %q, want terminal-t7:pw", auth.seen[0])
	}
}

// testCertificates returns a server certificate for 127.0.0.1 and a client certificate,
// both issued by one CA, and a pool holding that CA.
func testCertificates(t *testing.T) (server, client tls.Certificate, pool *x509.CertPool) {
	t.Helper()
	ca := testutil.NewCA(t, "sim test CA")
	return ca.Issue(t, "sim test", x509.ExtKeyUsageServerAuth), ca.Issue(t, "sim test", x509.ExtKeyUsageClientAuth), ca.Pool
}
