package broker

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate, the
// CA's and the server's written as PEM files in dir.
type testPKI struct {
	dir                   string
	ca                    *testutil.CA
	caPool                *x509.CertPool
	clientCert            tls.Certificate
	caFile                string
	serverCert, serverKey string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := testutil.NewCA(t, "faceagent test CA")
	p := &testPKI{dir: t.TempDir(), ca: ca, caPool: ca.Pool}
	p.caFile = ca.WriteCert(t, p.dir, "ca.pem")
	p.serverCert, p.serverKey = testutil.WriteKeyPair(t, ca.Issue(t, "broker", x509.ExtKeyUsageServerAuth), p.dir, "server.pem", "server-key.pem")
	p.clientCert = ca.Issue(t, "device", x509.ExtKeyUsageClientAuth)
	return p
}

func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	b := startBroker(t, Options{TLS: TLSOptions{CertFile: pki.serverCert, KeyFile: pki.serverKey}})
	c := dial(t, b.Addr(), "tls-client", dialOptions{tls: &tls.Config{RootCAs: pki.caPool}})
	if p := c.do(cmd("SET", "k", "v"), req{}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("SET over TLS: %q", p.Payload)
	}
	if _, err := tryDial(t, b.Addr(), "plain", dialOptions{}); err == nil {
		t.Fatal("plain TCP accepted on a TLS listener")
	}
}

func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	b := startBroker(t, Options{TLS: TLSOptions{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile}})
	if _, err := tryDial(t, b.Addr(), "no-cert", dialOptions{tls: &tls.Config{RootCAs: pki.caPool}}); err == nil {
		t.Fatal("client without a certificate accepted")
	}
	c := dial(t, b.Addr(), "with-cert", dialOptions{tls: &tls.Config{RootCAs: pki.caPool, Certificates: []tls.Certificate{pki.clientCert}}})
	if p := c.do(cmd("GET", "k"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("GET over mTLS: %q", p.Payload)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	pki := newTestPKI(t)
	for _, o := range []TLSOptions{
		{ClientCAFile: pki.caFile},
		{CertFile: pki.serverCert, KeyFile: filepath.Join(pki.dir, "missing.pem")},
		{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.serverKey},
	} {
		if _, err := New(&Options{AllowAnonymous: true, TLS: o}); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// clientCertificate issues a client certificate with Common Name cn from p's CA.
func (p *testPKI) clientCertificate(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	return p.ca.Issue(t, cn, x509.ExtKeyUsageClientAuth)
}
