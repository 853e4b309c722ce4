package broker

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/crypto/bcrypt"
)

// User is one account of the users file.
type User struct {
	Name string `toml:"name"`
	// PasswordHash is a bcrypt hash ("$2a$…", e.g. from `htpasswd -nbB` or
	// bcrypt.GenerateFromPassword).
	PasswordHash string `toml:"password_hash"`
	// CertificateCN, with mutual TLS, lists the client certificate Common Names this user
	// accepts; nil: the Common Name must equal Name (doc.go, "Certificates and users").
	CertificateCN []string `toml:"certificate_cn"`
	Rules
}

// Rules are what a client may do. Topic rules are MQTT filters in which
// "%c" stands for the client id and "%u" for the user name; key rules are
// state store key prefixes. A nil list allows everything; an empty list
// allows nothing.
type Rules struct {
	Publish   []string `toml:"publish"`    // topics the client may publish to
	Subscribe []string `toml:"subscribe"`  // filters it may subscribe to (and receive from)
	ReadKeys  []string `toml:"read_keys"`  // key prefixes for GET and KEYNOTIFY
	WriteKeys []string `toml:"write_keys"` // key prefixes for SET, DEL and VDEL
}

type usersFile struct {
	Users     []User `toml:"users"`
	Anonymous *Rules `toml:"anonymous"`
}

// loadUsers reads path (when set) and merges extra over it. anonymous is
// the file's [anonymous] table, nil when it has none.
func loadUsers(path string, extra []User) (users map[string]*User, anonymous *Rules, err error) {
	users = make(map[string]*User)
	if path != "" {
		var f usersFile
		md, err := toml.DecodeFile(path, &f)
		if err != nil {
			return nil, nil, fmt.Errorf("broker: users file: %w", err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, nil, fmt.Errorf("broker: users file %s: unknown key %s", path, und[0])
		}
		// toml leaves absent lists nil and present empty lists empty but
		// non-nil on its own; nothing more to do to keep "nil = all".
		for i := range f.Users {
			u := f.Users[i]
			if u.Name == "" {
				return nil, nil, fmt.Errorf("broker: users file %s: user %d has no name", path, i+1)
			}
			if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
				return nil, nil, fmt.Errorf("broker: users file %s: user %q: password_hash is not bcrypt: %w", path, u.Name, err)
			}
			if _, dup := users[u.Name]; dup {
				return nil, nil, fmt.Errorf("broker: users file %s: user %q twice", path, u.Name)
			}
			users[u.Name] = &u
		}
		anonymous = f.Anonymous
	}
	for i := range extra {
		u := extra[i]
		if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			return nil, nil, fmt.Errorf("broker: user %q: password_hash is not bcrypt: %w", u.Name, err)
		}
		users[u.Name] = &u
	}
	return users, anonymous, nil
}

// authHook authenticates clients against the users and authorizes topics.
// It is the only hook answering OnConnectAuthenticate and OnACLCheck (mochi
// ORs them across hooks, so a permissive second hook would open everything).
type authHook struct {
	mqtt.HookBase
	users          map[string]*User
	allowAnonymous bool
	anonymous      *Rules // nil: everything
	// certUsers: client certificates are required (mutual TLS) and users are configured, so
	// a user's certificate must be its own (certificateFits).
	certUsers bool
	owners    *sessionOwners
	log       *slog.Logger

	dummyOnce sync.Once
	dummy     []byte
}

func newAuthHook(users map[string]*User, allowAnonymous bool, anonymous *Rules, certUsers bool,
	owners *sessionOwners, log *slog.Logger) *authHook {
	return &authHook{users: users, allowAnonymous: allowAnonymous, anonymous: anonymous,
		certUsers: certUsers, owners: owners, log: log}
}

// The server asks the hook for the CONNACK's reason code of a refusal.
var _ mqtt.ConnectAuthenticator = (*authHook)(nil)

func (h *authHook) ID() string { return "faceagent-auth" }

func (h *authHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnSessionEstablished, mqtt.OnDisconnect:
		return true
	}
	return false
}

// AuthenticateConnect lets a client in when its credentials are right, its certificate
// (with mutual TLS) is its user's, its will's topic is allowed, and its client id is not
// another user's, and otherwise chooses the CONNACK's reason code (mochi's
// ConnectAuthenticator, asked in place of OnConnectAuthenticate). The last two checks come
// after the password, so that without credentials nothing can be learnt about user names
// or client ids in use.
func (h *authHook) AuthenticateConnect(cl *mqtt.Client, pk packets.Packet) packets.Code {
	if !h.authenticate(pk) {
		return packets.ErrBadUsernameOrPassword
	}
	user := string(pk.Connect.Username)
	if h.certUsers && user != "" {
		if cn, ok := h.certificateFits(cl, user); !ok {
			h.log.Warn("broker: CONNECT refused", "client", cl.ID, "user", user, "certificate_cn", cn,
				"reason", "the client certificate is not the user's")
			if cl.Properties.ProtocolVersion >= 5 {
				return packets.ErrNotAuthorized // 0x87
			}
			return packets.ErrBadUsernameOrPassword // 3.1.1 has no 0x87: 0x86 becomes its 0x05 Not authorized
		}
	}
	// mochi publishes a will without asking OnACLCheck, so a will could reach
	// any topic, a notification topic included: check it once the user is
	// known. The refusal is CONNACK 0x86, not 0x87, so that user names cannot
	// be probed through wills.
	if pk.Connect.WillFlag && !h.OnACLCheck(cl, pk.Connect.WillTopic, true) {
		return packets.ErrBadUsernameOrPassword
	}
	if holder, ok := h.owners.admit(cl); !ok {
		h.log.Warn("broker: CONNECT refused", "client", cl.ID, "user", user, "holder", holder,
			"reason", "the client id is held by another user")
		return packets.ErrClientIdentifierNotValid // 0x85; 3.1.1: 0x02
	}
	return packets.CodeSuccess
}

// OnConnectAuthenticate is AuthenticateConnect for callers of mochi's
// Hooks.OnConnectAuthenticate, which know no reason codes; the server itself asks
// AuthenticateConnect.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	return h.AuthenticateConnect(cl, pk).Code == packets.CodeSuccess.Code
}

// OnSessionEstablished ends the client id's claim: mochi's client list holds it now.
func (h *authHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) { h.owners.release(cl) }

// OnDisconnect ends a claim whose client left before it was established.
func (h *authHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { h.owners.release(cl) }

// certificateFits reports whether the client certificate of cl's connection belongs to
// user: its Subject Common Name is one of the user's CertificateCN, or the user name when
// the user lists none. cn is the certificate's Common Name.
func (h *authHook) certificateFits(cl *mqtt.Client, user string) (cn string, ok bool) {
	cert := peerCertificate(cl.Net.Conn)
	if cert == nil {
		return "", false
	}
	cn = cert.Subject.CommonName
	u := h.users[user]
	if u == nil || cn == "" {
		return cn, false
	}
	if u.CertificateCN == nil {
		return cn, cn == u.Name
	}
	return cn, slices.Contains(u.CertificateCN, cn)
}

func (h *authHook) authenticate(pk packets.Packet) bool {
	name := pk.Connect.Username
	if len(name) == 0 {
		return h.allowAnonymous && len(pk.Connect.Password) == 0
	}
	return h.checkPassword(string(name), pk.Connect.Password)
}

// checkPassword reports whether password is the password of the user name; an unknown
// name takes as long as a wrong password.
func (h *authHook) checkPassword(name string, password []byte) bool {
	u := h.users[name]
	if u == nil {
		// Spend the time a real check takes, so that probing names is no
		// faster than probing passwords.
		_ = bcrypt.CompareHashAndPassword(h.dummyHash(), password)
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), password) == nil
}

// dummyHash returns a bcrypt hash at the cost of the configured users'
// hashes (the highest), made once when first needed.
func (h *authHook) dummyHash() []byte {
	h.dummyOnce.Do(func() {
		cost := bcrypt.MinCost
		for _, u := range h.users {
			if c, err := bcrypt.Cost([]byte(u.PasswordHash)); err == nil && c > cost {
				cost = c
			}
		}
		h.dummy, _ = bcrypt.GenerateFromPassword([]byte("no such user"), cost)
	})
	return h.dummy
}

// rules returns the client's rules; nil means everything is allowed.
func (h *authHook) rules(cl *mqtt.Client) *Rules {
	if len(cl.Properties.Username) == 0 {
		return h.anonymous
	}
	if u := h.users[string(cl.Properties.Username)]; u != nil {
		return &u.Rules
	}
	return &Rules{Publish: []string{}, Subscribe: []string{}, ReadKeys: []string{}, WriteKeys: []string{}}
}

func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if write && isNotifyTopic(topic) {
		// Only the store writes notifications (straight to the connection,
		// wire fact 4); mochi does not ask about inline clients. A client that
		// could publish here could forge another client's notifications.
		return false
	}
	r := h.rules(cl)
	if r == nil {
		return true
	}
	filters := r.Subscribe
	if write {
		filters = r.Publish
	}
	if filters == nil {
		return true
	}
	for _, f := range filters {
		if filterCovers(expand(f, cl), topic) {
			return true
		}
	}
	return false
}

// isNotifyTopic reports whether topic is under the store's notification
// topics (NotifyTopicPrefix/{HEX(clientId)}/command/notify/{HEX(key)}).
func isNotifyTopic(topic string) bool {
	return strings.HasPrefix(topic, NotifyTopicPrefix) &&
		(len(topic) == len(NotifyTopicPrefix) || topic[len(NotifyTopicPrefix)] == '/')
}

// keyAccess adapts a client's key rules to statestore.KeyAccess.
type keyAccess struct{ rules *Rules }

func (k keyAccess) AllowKey(key []byte, write bool) bool {
	prefixes := k.rules.ReadKeys
	if write {
		prefixes = k.rules.WriteKeys
	}
	if prefixes == nil {
		return true
	}
	for _, p := range prefixes {
		if bytes.HasPrefix(key, []byte(p)) {
			return true
		}
	}
	return false
}

// expand substitutes %c (client id) and %u (user name) in a rule. Ids that
// contain MQTT wildcards or separators never match a substituted rule, so a
// client named "#" cannot widen its own rights.
func expand(rule string, cl *mqtt.Client) string {
	if !strings.Contains(rule, "%") {
		return rule
	}
	id, user := cl.ID, string(cl.Properties.Username)
	if strings.ContainsAny(id, "+#/") || strings.ContainsAny(user, "+#/") {
		return "\x00never"
	}
	return strings.NewReplacer("%c", id, "%u", user).Replace(rule)
}

// filterCovers reports whether every topic matched by topic (a topic name or
// a filter) is matched by the rule filter.
func filterCovers(rule, topic string) bool {
	if rule == topic {
		return true
	}
	r, t := strings.Split(rule, "/"), strings.Split(topic, "/")
	// [MQTT-4.7.2-1] a rule starting with a wildcard does not match $-topics.
	if len(t[0]) > 0 && t[0][0] == '$' && (r[0] == "#" || r[0] == "+") {
		return false
	}
	for i, rl := range r {
		if rl == "#" {
			return true
		}
		if i >= len(t) {
			return false
		}
		switch {
		case t[i] == "#":
			return false // the topic filter is wider than the rule
		case rl == "+":
		case rl != t[i]:
			return false
		}
	}
	return len(r) == len(t)
}

// peerCertificate returns the client certificate of a TLS connection, looking through
// wrappers that expose the connection they wrap (NetConn, as *tls.Conn and the listener's
// deadlineConn do); nil without one.
func peerCertificate(c net.Conn) *x509.Certificate {
	for c != nil {
		if t, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
			if certs := t.ConnectionState().PeerCertificates; len(certs) > 0 {
				return certs[0]
			}
			return nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}
