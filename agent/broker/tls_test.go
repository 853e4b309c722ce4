package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	dir                   string
	caPool                *x509.CertPool
	clientCert            tls.Certificate
	caFile                string
	serverCert, serverKey string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), caPool: x509.NewCertPool()}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "faceagent test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.ca, p.caKey = ca, caKey
	p.caPool.AddCert(ca)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", caDER)

	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	der, key := issue(2, "broker", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.serverCert = p.write(t, "server.pem", "CERTIFICATE", der)
	p.serverKey = p.writeKey(t, "server-key.pem", key)
	der, key = issue(3, "device", x509.ExtKeyUsageClientAuth, nil)
	certFile := p.write(t, "client.pem", "CERTIFICATE", der)
	keyFile := p.writeKey(t, "client-key.pem", key)
	if p.clientCert, err = tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *testPKI) write(t *testing.T, name, kind string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *testPKI) writeKey(t *testing.T, name string, key *ecdsa.PrivateKey) string {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name, "EC PRIVATE KEY", der)
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
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
