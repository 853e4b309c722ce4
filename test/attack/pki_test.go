package attack

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// pki is a CA with a server certificate for 127.0.0.1 and a client certificate, as PEM
// files for the agent's [broker] tls_* keys; and a second CA's client certificate, which
// the agent must refuse.
type pki struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	client, stranger              tls.Certificate
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	ca := testutil.NewCA(t, "faceagent attack CA")
	p := &pki{pool: ca.Pool}
	p.caFile = ca.WriteCert(t, dir, "ca.pem")
	p.serverCert, p.serverKey = testutil.WriteKeyPair(t, ca.Issue(t, clientCN, x509.ExtKeyUsageServerAuth), dir, "server.pem", "server.key")
	p.client = ca.Issue(t, clientCN, x509.ExtKeyUsageClientAuth)
	p.stranger = testutil.NewCA(t, "someone else's CA").Issue(t, clientCN, x509.ExtKeyUsageClientAuth)
	return p
}

// clientCN is the Common Name of the certificates newPKI makes.
const clientCN = "faceagent attack"

// clientTLS is the configuration of a client the agent lets in.
func (p *pki) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}
}
