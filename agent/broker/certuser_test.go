package broker

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
)

// TestClientCertificateBelongsToItsUser: with mutual TLS and users, a client certificate
// belongs to one user, so a terminal's certificate with the back office's password cannot
// log in as the back office. A user's certificate must carry its name as Common Name, or
// one of the names its certificate_cn lists; another is refused with 0x87 (MQTT 3.1.1:
// 0x05), after the password (a wrong one is still 0x86).
func TestClientCertificateBelongsToItsUser(t *testing.T) {
	pki := newTestPKI(t)
	users := ownerUsersFile(t, `certificate_cn = ["door-1", "door-2"]`)
	var log logBuffer
	b := startBroker(t, Options{
		TLS:       TLSOptions{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile},
		UsersFile: users, AllowAnonymous: true, Logger: log.logger(),
	})
	for i, tc := range []struct {
		cn, user, password string
		version            byte
		want               byte
	}{
		{"backoffice", "backoffice", backofficePassword, 5, 0x00},
		{"door-1", "backoffice", backofficePassword, 5, 0x87}, // a terminal's certificate
		{"door-1", "backoffice", backofficePassword, 4, 0x05},
		{"backoffice", "backoffice", "wrong", 5, 0x86},
		{"door-1", "terminal", terminalPassword, 5, 0x00},
		{"door-2", "terminal", terminalPassword, 4, 0x00},
		{"terminal", "terminal", terminalPassword, 5, 0x87}, // its list replaces its name
		{"backoffice", "terminal", terminalPassword, 5, 0x87},
		{"door-1", "", "", 5, 0x00}, // anonymous, allowed: the certificate is all there is
	} {
		c := dialTLSMem(t, b.Addr(), &tls.Config{RootCAs: pki.caPool,
			Certificates: []tls.Certificate{pki.clientCertificate(t, tc.cn)}})
		code, _ := connectOn(t, c, fmt.Sprintf("client-%d", i), tc.user, tc.password, tc.version, true)
		if code != tc.want {
			t.Errorf("certificate %q as user %q (MQTT %d): CONNACK %#x, want %#x", tc.cn, tc.user, tc.version, code, tc.want)
		}
		c.close()
	}
	got := log.String()
	if !strings.Contains(got, `user=backoffice certificate_cn=door-1`) {
		t.Errorf("a refused certificate is not logged with its user and Common Name:\n%s", got)
	}
	if strings.Contains(got, backofficePassword) || strings.Contains(got, terminalPassword) {
		t.Errorf("the log holds a password:\n%s", got)
	}
}

// dialTLSMem opens a raw MQTT connection over TLS, closed when t ends.
func dialTLSMem(t *testing.T, addr string, cfg *tls.Config) *memClient {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &memClient{conn: conn, r: bufio.NewReader(conn)}
	t.Cleanup(c.close)
	return c
}
