package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Topics of the state store service.
const (
	// InvokeTopic is where clients publish requests.
	InvokeTopic = sswire.InvokeTopic
	// NotifyTopicPrefix starts every notification topic; response topics
	// starting with it are forbidden (wire fact 10).
	NotifyTopicPrefix = sswire.NotifyTopicPrefix
)

// Texts of the -ERR replies to requests that fail an MQTT precondition. The
// protocol only says such requests fail; these texts are ours.
const (
	ErrTextQoS           = "requests must be published with QoS 1"
	ErrTextNoCorrelation = "missing correlation data"
)

// CodeForbiddenResponseTopic is the DISCONNECT reason sent to a client whose
// request names a forbidden response topic (protocol: "The state store
// disconnects MQTT clients that use an invalid response topic").
var CodeForbiddenResponseTopic = packets.Code{
	Code:   packets.ErrTopicNameInvalid.Code,
	Reason: "state store: response topic not permitted",
}

// Response property values (wire fact 5).
const (
	contentType     = "application/octet-stream"
	protocolVersion = "1.0"
)

// service is the mochi hook that serves the state store: it answers
// requests in OnPublish on the requesting client's read loop (no I/O there:
// the engine is in memory and the response is queued through an inline
// client) and drops KEYNOTIFY registrations in OnDisconnect.
type service struct {
	mqtt.HookBase
	srv       *mqtt.Server
	store     *statestore.Store
	auth      *authHook
	log       *slog.Logger
	responder *mqtt.Client // dedicated inline client (wire fact 11)
	// notifyBudget bounds the notification bytes queued or unacknowledged
	// across all connections (Options.MaxBytes; nil: none).
	notifyBudget     *statestore.ByteBudget
	notifyAckTimeout time.Duration

	// Answers to persistent changes hold the requester's PUBACK (answerwait.go): records
	// is the session store (nil without DataDir), answerTimeout bounds the wait.
	records       mqtt.AckWaiter
	answers       answerWaits
	answerTimeout time.Duration
	closing       chan struct{}
	closeOnce     sync.Once

	mu        sync.Mutex
	notifiers map[*mqtt.Client]*notifier
	stopping  bool
	wg        sync.WaitGroup
	closeErr  error
}

func newService(srv *mqtt.Server, store *statestore.Store, auth *authHook, log *slog.Logger, o *Options) *service {
	var id [8]byte
	_, _ = rand.Read(id[:])
	// The Go SDK subscribes to its response topic with No Local: responses
	// must come from a client id no real client uses, not mochi's "inline".
	responder := srv.NewClient(nil, mqtt.LocalListener, "$statestore-"+hex.EncodeToString(id[:]), true)
	responder.Properties.ProtocolVersion = 5
	ackTimeout := o.NotifyAckTimeout
	if ackTimeout <= 0 {
		ackTimeout = DefaultNotifyAckTimeout
	}
	answerTimeout := o.WriteTimeout
	if answerTimeout <= 0 {
		answerTimeout = DefaultWriteTimeout
	}
	return &service{
		srv: srv, store: store, auth: auth, log: log, responder: responder,
		notifyBudget: statestore.NewByteBudget(o.MaxBytes), notifyAckTimeout: ackTimeout,
		answerTimeout: answerTimeout, closing: make(chan struct{}),
		notifiers: make(map[*mqtt.Client]*notifier),
	}
}

func (s *service) ID() string { return "faceagent-statestore" }

func (s *service) Provides(b byte) bool {
	return b == mqtt.OnPublish || b == mqtt.OnDisconnect || b == mqtt.OnQosComplete || b == mqtt.OnQosDropped
}

// OnQosComplete tells cl's notifier: a PUBACK freed room in the client's
// Receive Maximum, for a notification (whose bytes are released) or for any
// message mochi routed.
func (s *service) OnQosComplete(cl *mqtt.Client, pk packets.Packet) { s.completed(cl, pk.PacketID) }

// OnQosDropped tells cl's notifier: mochi gave up an inflight message.
func (s *service) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { s.completed(cl, pk.PacketID) }

func (s *service) completed(cl *mqtt.Client, id uint16) {
	s.mu.Lock()
	n := s.notifiers[cl]
	s.mu.Unlock()
	if n != nil {
		n.completed(id)
	}
}

// Stop is called by mochi's Close after every client is gone.
func (s *service) Stop() error {
	s.mu.Lock()
	s.stopping = true
	for cl, n := range s.notifiers {
		n.Stop()
		delete(s.notifiers, cl)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.closeErr = s.store.Close()
	return s.closeErr
}

// OnPublish serves requests on InvokeTopic (docs/design.md "Library facts"): answer, then
// return CodeSuccessIgnore (PUBACK sent, the request not routed);
// ErrRejectPacket only together with DisconnectClient.
func (s *service) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != InvokeTopic {
		return pk, nil
	}
	rt := pk.Properties.ResponseTopic
	// A response topic with wildcards, or under $SYS or $share, is no topic
	// name at all (mochi does not check the property): as forbidden.
	if rt == InvokeTopic || strings.HasPrefix(rt, NotifyTopicPrefix) || (rt != "" && !mqtt.IsValidFilter(rt, true)) {
		s.log.Warn("state store: forbidden response topic, disconnecting", "client", cl.ID, "response_topic", rt)
		_ = s.srv.DisconnectClient(cl, CodeForbiddenResponseTopic)
		return pk, packets.ErrRejectPacket
	}
	if rt == "" {
		s.log.Warn("state store: request without a response topic dropped", "client", cl.ID)
		return pk, packets.CodeSuccessIgnore
	}
	if !s.responseTopicAllowed(cl, rt) {
		// The responder publishes without an ACL check: a response topic the
		// client may not publish to would let it publish there (a value it
		// SET, through a GET) by way of the store.
		s.log.Warn("state store: response topic not authorized, request refused", "client", cl.ID, "response_topic", rt)
		if pk.FixedHeader.Qos > 0 && cl.Properties.ProtocolVersion == 5 {
			return pk, packets.ErrNotAuthorized // PUBACK 0x87
		}
		return pk, packets.CodeSuccessIgnore
	}
	s.serve(cl, &pk)
	return pk, packets.CodeSuccessIgnore
}

// goResponseSuffix follows clients/{UPPERHEX(clientId)} in the Go SDK's
// response topic (its prefix, the request topic and its suffix "response").
const goResponseSuffix = "/" + InvokeTopic + "/response"

// responseTopicAllowed reports whether the store may answer cl on topic.
// Responses are published without an ACL check, so for a client with publish
// rules the topic must be the client's own (ownsResponseTopic) or allowed by
// those rules; a client without publish rules may publish anywhere anyway.
func (s *service) responseTopicAllowed(cl *mqtt.Client, topic string) bool {
	if r := s.auth.rules(cl); r == nil || r.Publish == nil {
		return true
	}
	return ownsResponseTopic(cl.ID, topic, s.knownClient) || s.auth.OnACLCheck(cl, topic, true)
}

// knownClient reports whether the broker has a client or a kept session with
// this id.
func (s *service) knownClient(id string) bool {
	_, ok := s.srv.Clients.Get(id)
	return ok
}

// ownsResponseTopic reports whether topic belongs to client id, by the SDKs'
// conventions:
//   - clients/{id}/… is the client's own namespace (the .NET and Rust SDKs'
//     response topics lie there), whoever else is connected;
//   - clients/{UPPERHEX(id)}/statestore/v1/…/command/invoke/response, exactly
//     (the Go SDK's response topic), is lent to it as long as no client or
//     kept session has the id UPPERHEX(id): that string is also a client id,
//     whose own namespace it is. Client "AB" may answer itself on
//     clients/4142/statestore/…/response only while there is no client "4142".
//
// Nothing else under clients/{UPPERHEX(id)}/ is the client's: the hex alias
// must not reach into the rest of another client's namespace.
func ownsResponseTopic(id, topic string, known func(id string) bool) bool {
	if id == "" || strings.ContainsAny(id, "+#/") {
		return false
	}
	rest, ok := strings.CutPrefix(topic, "clients/")
	if !ok {
		return false
	}
	if own, ok := strings.CutPrefix(rest, id); ok && strings.HasPrefix(own, "/") {
		return true
	}
	hexID := strings.ToUpper(hex.EncodeToString([]byte(id)))
	return rest == hexID+goResponseSuffix && !known(hexID)
}

// serve answers one request that has a usable response topic.
func (s *service) serve(cl *mqtt.Client, pk *packets.Packet) {
	out := make([]byte, 0, 64+len(pk.Payload))
	var version hlc.Timestamp // none for precondition errors
	switch {
	case pk.FixedHeader.Qos != 1:
		out = appendErr(out, ErrTextQoS)
	case len(pk.Properties.CorrelationData) == 0:
		out = appendErr(out, ErrTextNoCorrelation)
	default:
		req := statestore.Request{Payload: pk.Payload}
		for _, p := range pk.Properties.User {
			switch p.Key {
			case "__ts":
				req.Timestamp, req.HasTimestamp = p.Val, true
			case "__ft":
				req.FencingToken, req.HasFencingToken = p.Val, true
			case "aio-persistence":
				req.Persist = strings.EqualFold(p.Val, "true")
			}
		}
		if r := s.auth.rules(cl); r != nil && (r.ReadKeys != nil || r.WriteKeys != nil) {
			req.Access = keyAccess{r}
		}
		if isKeyNotify(pk.Payload) {
			if n := s.notifierFor(cl); n != nil {
				req.Watcher = n
			}
		}
		// A change of a persistent key is answered once it is on disk; the
		// persistence goroutine sends that response, not this read loop, and the
		// request's PUBACK waits for it (answerwait.go).
		// The answer may wait for a snapshot for long (a full disk): it keeps copies of its
		// address, not the request's packet (mochi decodes both as views into it), and its
		// count, not the connection. They count against the store's MaxBytes meanwhile.
		to := responseTo{clientID: cl.ID, topic: pk.Properties.ResponseTopic,
			correlation: pk.Properties.CorrelationData, expiresAt: requestExpiry(pk)}
		later := to
		later.clientID = strings.Clone(to.clientID)
		later.topic = strings.Clone(to.topic)
		later.correlation = bytes.Clone(to.correlation)
		req.WaitBytes = len(later.clientID) + len(later.topic) + len(later.correlation)
		var due *answersDue
		if s.waitsForAnswer(cl) {
			due = s.answers.due(cl)
		}
		out, v, wait := s.store.DoDurable(&req, out, func(reply []byte, v hlc.Timestamp, err error) {
			if err != nil {
				s.log.Error("state store: persistent change answered without a snapshot", "client", later.clientID, "error", err)
			}
			s.respond(later, reply, v)
			if due != nil {
				s.answers.answered(due)
			}
		})
		if wait {
			return
		}
		if due != nil {
			s.answers.answered(due)
		}
		s.respond(to, out, v)
		return
	}
	s.respond(responseTo{clientID: cl.ID, topic: pk.Properties.ResponseTopic,
		correlation: pk.Properties.CorrelationData, expiresAt: requestExpiry(pk)}, out, version)
}

// responseTo is where a response goes and until when it is worth reading.
type responseTo struct {
	clientID, topic string
	correlation     []byte
	expiresAt       time.Time // the request's expiry; zero: it had none
}

// requestExpiry returns when the request expires: its arrival (mochi's
// Created, whole seconds) plus its Message Expiry Interval; zero without one.
func requestExpiry(pk *packets.Packet) time.Time {
	if pk.Properties.MessageExpiryInterval == 0 || pk.Created == 0 {
		return time.Time{}
	}
	return time.Unix(pk.Created+int64(pk.Properties.MessageExpiryInterval), 0)
}

// responseExpiry is the Message Expiry Interval of a response to a request
// that expires at expiresAt: what remains of the request's, rounded up to
// whole seconds and at least 1 (0 would mean "never"), so that a response
// never outlives the request it answers (the requester has given up by
// then). A request without one gets none: mochi then applies its maximum,
// as to any message.
func responseExpiry(expiresAt, now time.Time) uint32 {
	if expiresAt.IsZero() {
		return 0
	}
	left := expiresAt.Sub(now)
	secs := (left + time.Second - 1) / time.Second
	return uint32(max(secs, 1))
}

// respond publishes a reply through the responder (wire facts 5 and 11).
func (s *service) respond(to responseTo, payload []byte, version hlc.Timestamp) {
	props := packets.Properties{
		ContentType:           contentType,
		CorrelationData:       to.correlation,
		MessageExpiryInterval: responseExpiry(to.expiresAt, time.Now()),
		User: []packets.UserProperty{
			{Key: "__stat", Val: "200"},
			{Key: "__protVer", Val: protocolVersion},
		},
	}
	if !version.IsZero() {
		props.User = append(props.User, packets.UserProperty{Key: "__ts", Val: version.String()})
	}
	err := s.srv.InjectPacket(s.responder, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   to.topic,
		Payload:     payload,
		Properties:  props,
		PacketID:    1, // non-zero for QoS>0 (docs/design.md "Library facts"); the inline client never uses it
	})
	if err != nil {
		s.log.Warn("state store: response not sent", "client", to.clientID, "error", err)
	}
}

// isKeyNotify reports whether payload is a KEYNOTIFY command, so that only
// those requests get a notifier (and its goroutine).
func isKeyNotify(payload []byte) bool {
	var argv [4][]byte
	args, _, _ := resp3.ReadCommand(payload, argv[:0])
	return len(args) > 0 && bytes.EqualFold(args[0], []byte("KEYNOTIFY"))
}

// OnDisconnect drops the client's registrations. Registrations belong to
// the *mqtt.Client, not the client id: on a session takeover this fires for
// the old connection, possibly after the new one registered (docs/design.md
// "Library facts").
func (s *service) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	s.answers.forget(cl)
	s.mu.Lock()
	n := s.notifiers[cl]
	delete(s.notifiers, cl)
	s.mu.Unlock()
	if n == nil {
		return
	}
	s.store.Unwatch(n)
	n.Stop()
}

// notifierFor returns cl's notifier, starting it on first use; nil once the
// service is stopping.
func (s *service) notifierFor(cl *mqtt.Client) *notifier {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.notifiers[cl]; n != nil {
		return n
	}
	if s.stopping || cl.Closed() {
		return nil
	}
	n := newNotifier(s, cl)
	s.notifiers[cl] = n
	s.wg.Add(1)
	go n.run()
	return n
}

func appendErr(dst []byte, text string) []byte {
	dst = append(dst, "-ERR "...)
	dst = append(dst, text...)
	return append(dst, '\r', '\n')
}
