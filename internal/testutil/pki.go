package testutil

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
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for TLS tests: a self-signed ECDSA P-256 CA certificate,
// its key, and a pool that trusts it (a client's RootCAs, a server's ClientCAs). The
// certificates it issues are valid from an hour ago for a day, for 127.0.0.1.
type CA struct {
	Cert   *x509.Certificate
	Pool   *x509.CertPool
	key    *ecdsa.PrivateKey
	serial atomic.Int64 // the last serial number given; the CA's own is 1
}

// NewCA makes a CA whose Common Name is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newECKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Pool: x509.NewCertPool(), key: key}
	ca.Pool.AddCert(cert)
	ca.serial.Store(1)
	return ca
}

// Issue returns a certificate with a new key, Common Name cn and extended key usage usage
// (x509.ExtKeyUsageServerAuth for a server, ExtKeyUsageClientAuth for a client), naming
// 127.0.0.1, with the next serial number of ca.
func (ca *CA) Issue(t testing.TB, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key := newECKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// WriteCert writes ca's certificate as a PEM file name in dir (what a client CA file or a
// CA file setting names) and returns its path.
func (ca *CA) WriteCert(t testing.TB, dir, name string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, name), "CERTIFICATE", ca.Cert.Raw)
}

// WriteKeyPair writes cert, which Issue made, as two PEM files in dir, its certificate as
// certName and its key as keyName (what a server's certificate and key settings name), and
// returns their paths.
func WriteKeyPair(t testing.TB, cert tls.Certificate, dir, certName, keyName string) (certFile, keyFile string) {
	t.Helper()
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("WriteKeyPair: key %T, not one Issue makes", cert.PrivateKey)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writePEM(t, filepath.Join(dir, certName), "CERTIFICATE", cert.Certificate[0])
	keyFile = writePEM(t, filepath.Join(dir, keyName), "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func newECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, kind string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
