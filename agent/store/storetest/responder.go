// Package storetest runs a small state store behind any MQTT broker, for tests of state store
// clients (agent/store) against Debian's mosquitto: the real store sits behind a
// broker that is not ours in production. It answers as the service does (docs/design.md
// "State store wire facts"; GET/SET NX NEX PX/DEL/VDEL/KEYNOTIFY, fencing tokens, versions,
// notifications) but keeps its data in memory only. A key "error:<text>" makes it answer
// "-ERR <text>".
package storetest

import (
	"context"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Topics of the state store service.
const (
	InvokeTopic       = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
	notifyTopicPrefix = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/"
)

// Responder is a state store served through an ordinary MQTT client.
type Responder struct {
	t     testing.TB
	cm    *autopaho.ConnectionManager
	clock *hlc.Clock
	work  chan *paho.Publish
	notes chan *paho.Publish
	wg    sync.WaitGroup
	ready chan struct{}
	once  sync.Once

	mu       sync.Mutex
	data     map[string]*rEntry
	watchers map[string]map[string]bool // key → client ids
	requests int
	last     *paho.Publish // the latest request, for checks of its properties
	// hold, when set, swallows requests instead of answering them (for timeout and
	// connection-loss tests); held counts them.
	hold bool
	held chan struct{}
}

type rEntry struct {
	value   []byte
	version hlc.Timestamp
	fencing hlc.Timestamp
	timer   *time.Timer
}

// Start connects a Responder to the broker at brokerURL and waits until it is subscribed. It
// stops when the test ends.
func Start(t testing.TB, brokerURL string) *Responder {
	t.Helper()
	r := &Responder{
		t:        t,
		clock:    hlc.NewClock("StateStore"),
		work:     make(chan *paho.Publish, 4096),
		notes:    make(chan *paho.Publish, 4096),
		ready:    make(chan struct{}),
		data:     map[string]*rEntry{},
		watchers: map[string]map[string]bool{},
		held:     make(chan struct{}, 4096),
	}
	u, _ := url.Parse(brokerURL)
	ctx, cancel := context.WithCancel(context.Background())
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls:       []*url.URL{u},
		KeepAlive:        30,
		ReconnectBackoff: autopaho.NewConstantBackoff(20 * time.Millisecond),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: InvokeTopic, QoS: 1}}}); err == nil {
					r.once.Do(func() { close(r.ready) })
				}
			}()
		},
		ClientConfig: paho.ClientConfig{
			ClientID: "statestore-responder",
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				r.work <- pr.Packet
				return true, nil
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.cm = cm
	for range 4 {
		r.wg.Add(1)
		go r.serve(ctx)
	}
	r.wg.Add(1)
	go r.notifier(ctx)
	t.Cleanup(func() {
		cancel()
		<-cm.Done()
		r.wg.Wait()
		r.mu.Lock()
		for _, e := range r.data {
			if e.timer != nil {
				e.timer.Stop()
			}
		}
		r.mu.Unlock()
	})
	select {
	case <-r.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("responder did not subscribe")
	}
	return r
}

func (r *Responder) serve(ctx context.Context) {
	defer r.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.work:
			r.mu.Lock()
			r.requests++
			r.last = p
			hold := r.hold
			r.mu.Unlock()
			if hold {
				r.held <- struct{}{}
				continue
			}
			payload, ts := r.handle(p)
			if p.Properties == nil || p.Properties.ResponseTopic == "" {
				continue
			}
			user := paho.UserProperties{{Key: "__stat", Value: "200"}, {Key: "__protVer", Value: "1.0"}}
			if !ts.IsZero() {
				user = append(user, paho.UserProperty{Key: "__ts", Value: ts.String()})
			}
			_, _ = r.cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: p.Properties.ResponseTopic, Payload: payload,
				Properties: &paho.PublishProperties{CorrelationData: p.Properties.CorrelationData,
					ContentType: "application/octet-stream", User: user}})
		}
	}
}

// Last returns the latest request received, for checks of its properties.
func (r *Responder) Last() *paho.Publish {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Held receives one value per request swallowed while SetHold(true).
func (r *Responder) Held() <-chan struct{} { return r.held }

// SetHold makes the responder swallow requests (true) or answer them (false).
func (r *Responder) SetHold(hold bool) {
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
}

func rErr(text string) []byte { return resp3.AppendError(nil, "ERR "+text) }

// handle executes one request and returns the response payload and __ts.
func (r *Responder) handle(p *paho.Publish) ([]byte, hlc.Timestamp) {
	var argv [8][]byte
	args, err := resp3.ParseCommand(p.Payload, argv[:0])
	if err != nil {
		return rErr("syntax error"), hlc.Timestamp{}
	}
	var user paho.UserProperties
	if p.Properties != nil {
		user = p.Properties.User
	}
	client := user.Get("__srcId")
	var ft hlc.Timestamp
	if s := user.Get("__ft"); s != "" {
		if ft, err = hlc.ParseString(s); err != nil {
			return rErr("malformed timestamp"), hlc.Timestamp{}
		}
	}
	verb := strings.ToUpper(string(args[0]))
	if len(args) < 2 {
		return rErr("wrong number of arguments"), hlc.Timestamp{}
	}
	key := string(args[1])
	if key == "" {
		return rErr("the key length is zero"), hlc.Timestamp{}
	}
	if text, ok := strings.CutPrefix(key, "error:"); ok { // lets tests get any error text
		return rErr(text), hlc.Timestamp{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.data[key]
	fenced := func() []byte {
		if e == nil || e.fencing.IsZero() {
			return nil
		}
		if ft.IsZero() {
			return rErr("a fencing token is required for this request")
		}
		if hlc.Compare(ft, e.fencing) < 0 {
			return rErr("the request fencing token is a lower version than the fencing token protecting the resource")
		}
		return nil
	}
	switch verb {
	case "GET":
		if e == nil {
			return resp3.AppendNullBlob(nil), hlc.Timestamp{}
		}
		return resp3.AppendBlob(nil, e.value), e.version
	case "SET":
		tsText := user.Get("__ts")
		if tsText == "" {
			return rErr("missing timestamp"), hlc.Timestamp{}
		}
		ts, err := hlc.ParseString(tsText)
		if err != nil {
			return rErr("malformed timestamp"), hlc.Timestamp{}
		}
		if len(args) < 3 {
			return rErr("wrong number of arguments"), hlc.Timestamp{}
		}
		value := append([]byte(nil), args[2]...)
		var px time.Duration
		var nx, nex bool
		for i := 3; i < len(args); i++ {
			switch strings.ToUpper(string(args[i])) {
			case "NX":
				nx = true
			case "NEX":
				nex = true
			case "PX":
				if i+1 >= len(args) {
					return rErr("syntax error"), hlc.Timestamp{}
				}
				ms, err := strconv.Atoi(string(args[i+1]))
				if err != nil || ms <= 0 {
					return rErr("syntax error"), hlc.Timestamp{}
				}
				px = time.Duration(ms) * time.Millisecond
				i++
			default:
				return rErr("syntax error"), hlc.Timestamp{}
			}
		}
		if e != nil && (nx || nex && string(e.value) != string(value)) {
			return resp3.AppendInt(nil, -1), e.version // wire fact 1
		}
		if msg := fenced(); msg != nil {
			return msg, hlc.Timestamp{}
		}
		version, err := r.clock.Update(ts)
		if err != nil {
			return rErr("the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"), hlc.Timestamp{}
		}
		ne := &rEntry{value: value, version: version, fencing: ft}
		if e != nil {
			if e.timer != nil {
				e.timer.Stop()
			}
			if hlc.Compare(e.fencing, ft) > 0 {
				ne.fencing = e.fencing
			}
		}
		if px > 0 {
			ne.timer = time.AfterFunc(px, func() { r.expire(key, ne) })
		}
		r.data[key] = ne
		r.notifyLocked(key, append(resp3.AppendArrayHeader(nil, 4), r.blobs("NOTIFY", "SET", "VALUE", string(value))...), version)
		return resp3.AppendSimpleString(nil, "OK"), version
	case "DEL", "VDEL":
		if verb == "VDEL" && len(args) != 3 || verb == "DEL" && len(args) != 2 {
			return rErr("wrong number of arguments"), hlc.Timestamp{}
		}
		if e == nil {
			return resp3.AppendInt(nil, 0), hlc.Timestamp{}
		}
		if verb == "VDEL" && string(e.value) != string(args[2]) {
			return resp3.AppendInt(nil, -1), e.version
		}
		if msg := fenced(); msg != nil {
			return msg, hlc.Timestamp{}
		}
		r.deleteLocked(key)
		return resp3.AppendInt(nil, 1), e.version
	case "KEYNOTIFY":
		if len(args) == 3 && strings.EqualFold(string(args[2]), "STOP") {
			if !r.watchers[key][client] {
				return resp3.AppendInt(nil, 0), hlc.Timestamp{}
			}
			delete(r.watchers[key], client)
			return resp3.AppendSimpleString(nil, "OK"), hlc.Timestamp{}
		}
		if r.watchers[key] == nil {
			r.watchers[key] = map[string]bool{}
		}
		r.watchers[key][client] = true
		return resp3.AppendSimpleString(nil, "OK"), hlc.Timestamp{}
	}
	return rErr("unknown command"), hlc.Timestamp{}
}

func (r *Responder) blobs(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = resp3.AppendBlobString(b, s)
	}
	return b
}

func (r *Responder) expire(key string, e *rEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.data[key] == e {
		r.deleteLocked(key)
	}
}

func (r *Responder) deleteLocked(key string) {
	delete(r.data, key)
	r.notifyLocked(key, append(resp3.AppendArrayHeader(nil, 2), r.blobs("NOTIFY", "DELETE")...), r.clock.Now())
}

// notifyLocked publishes a notification to every client watching key. Publishing happens on a
// goroutine: the broker may be down (then the notification is lost, like the real service's).
func (r *Responder) notifyLocked(key string, payload []byte, ts hlc.Timestamp) {
	for client := range r.watchers[key] {
		topic := notifyTopicPrefix + strings.ToUpper(hex.EncodeToString([]byte(client))) + "/command/notify/" + strings.ToUpper(hex.EncodeToString([]byte(key)))
		select {
		case r.notes <- &paho.Publish{QoS: 1, Topic: topic, Payload: payload,
			Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "__ts", Value: ts.String()}}}}:
		default: // full: lost, as when the broker is down
		}
	}
}

// notifier publishes notifications in order, one at a time.
func (r *Responder) notifier(ctx context.Context) {
	defer r.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.notes:
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = r.cm.Publish(pctx, p)
			cancel()
		}
	}
}

// SetDirect changes a key without MQTT and without notifications, as another client would
// while the one under test is away.
func (r *Responder) SetDirect(key, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data[key] = &rEntry{value: []byte(value), version: r.clock.Now()}
}
