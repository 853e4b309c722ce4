package sim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// A terminal with Options.Username ("{id}" replaced), Password and TLS connects to a broker
// that wants both a client certificate and credentials, and takes a command. The broker
// knows one user, terminal-t7 with password pw, and no anonymous clients: the terminal is
// ready only if it sent exactly those.
func TestMQTTTerminalWithCredentialsOverMutualTLS(t *testing.T) {
	ca := testutil.NewCA(t, "sim test CA")
	dir := t.TempDir()
	certFile, keyFile := testutil.WriteKeyPair(t, ca.Issue(t, "sim test", x509.ExtKeyUsageServerAuth), dir, "server.crt", "server.key")
	clientCert := ca.Issue(t, "sim test", x509.ExtKeyUsageClientAuth)
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(&broker.Options{
		Listen: testutil.FreeAddr(t), Logger: slog.New(slog.DiscardHandler),
		TLS: broker.TLSOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: ca.WriteCert(t, dir, "ca.crt")},
		// The client certificate's Common Name is not the user name: the user accepts it.
		Users: []broker.User{{Name: "terminal-t7", PasswordHash: string(hash), CertificateCN: []string{"sim test"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := mqttlink.New(mqttlink.Config{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	f, err := StartMQTT("mqtts://"+b.Addr(), []string{"t7"}, strict(t, Options{Seed: 1,
		Username: "terminal-{id}", Password: []byte("pw"),
		TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{clientCert}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatalf("terminal not ready (refused CONNECT: wrong credentials or certificate?): %v", err)
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
}
