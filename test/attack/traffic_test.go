package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device/sim"
)

// The traffic that runs throughout: what must go on whatever the attack.
const (
	// submitEvery is the back office's pace: one task at a time, this often.
	submitEvery = 20 * time.Millisecond
	// quietBound is the longest the terminals may go without a command, and the back
	// office without a result, while the back office submits: longer than any stall of a
	// loaded test machine, far shorter than the broker's 10 s connect and 30 s write
	// timeouts, which a stalled agent waits on.
	quietBound = 5 * time.Second
	// resultDeadline bounds the wait after an attack for the result of every task the
	// agent acknowledged, and for the first commands after it.
	resultDeadline = 20 * time.Second
	// backOfficeID is the back office's client id; its session is kept for an hour.
	backOfficeID = "bo-attack"
)

// traffic is the simulated terminals and the persistent back office.
type traffic struct {
	s      *system
	fleets []*sim.Fleet // one per terminal with a users file (each its own password)
	bo     *backOffice

	violations atomic.Int64 // strict-mode violations of the terminals
	mu         sync.Mutex
	lastErr    error // the last violation
}

func startTraffic(t *testing.T, s *system) *traffic {
	t.Helper()
	tr := &traffic{s: s}
	opts := sim.Options{
		Seed: 1, AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond},
		HeartbeatInterval: 200 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) {
			tr.violations.Add(1)
			tr.mu.Lock()
			tr.lastErr = fmt.Errorf("terminal %s: %w", id, err)
			tr.mu.Unlock()
		},
	}
	url := "mqtt://" + s.brokerAddr
	if s.pki != nil {
		url = "mqtts://" + s.brokerAddr
		opts.TLS = s.pki.clientTLS()
	}
	groups := [][]string{terminals}
	if s.setup.users {
		groups = nil
		for _, id := range terminals {
			groups = append(groups, []string{id})
		}
	}
	for _, ids := range groups {
		o := opts
		if s.setup.users {
			o.Username, o.Password = ids[0], []byte(password(ids[0]))
		}
		f, err := sim.StartMQTT(url, ids, o)
		if err != nil {
			tr.stop()
			t.Fatal(err)
		}
		tr.fleets = append(tr.fleets, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, f := range tr.fleets {
		if err := f.WaitReady(ctx); err != nil {
			tr.stop()
			t.Fatalf("terminals not ready: %v\n%s", err, s.log.tail(4096))
		}
	}
	tr.bo = startBackOffice(s)
	if err := tr.bo.waitConnected(20 * time.Second); err != nil {
		tr.stop()
		t.Fatalf("back office: %v\n%s", err, s.log.tail(4096))
	}
	return tr
}

// received is the commands the terminals got so far, all together.
func (tr *traffic) received() int {
	n := 0
	for _, f := range tr.fleets {
		for _, st := range f.Stats() {
			n += st.Received
		}
	}
	return n
}

func (tr *traffic) stop() {
	if tr.bo != nil {
		tr.bo.stop()
	}
	for _, f := range tr.fleets {
		_ = f.Close()
	}
}

// checkServing fails t unless serving went on: no strict-mode violation, the terminals
// get commands again, and every task the agent acknowledged so far has its result within
// resultDeadline.
func (tr *traffic) checkServing(t *testing.T) {
	t.Helper()
	if n := tr.violations.Load(); n > 0 {
		tr.mu.Lock()
		err := tr.lastErr
		tr.mu.Unlock()
		t.Errorf("%d strict-mode violations at the terminals, the last: %v", n, err)
	}
	deadline := time.Now().Add(resultDeadline)
	from := tr.received()
	for tr.received() < from+2*len(terminals) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminals got %d commands in %v after the attack", tr.received()-from, resultDeadline)
		}
		tr.bo.wait(50 * time.Millisecond)
	}
	acked := tr.bo.ackedTasks()
	for {
		missing := tr.bo.missingResults(acked)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged tasks have no result %v after the attack (e.g. %s)",
				len(missing), len(acked), resultDeadline, missing[0])
		}
		tr.bo.wait(100 * time.Millisecond)
	}
}

// backOffice submits a task every submitEvery over a kept session (expiry one hour,
// reconnecting with clean start off) and collects results and deadletters.
type backOffice struct {
	s      *system
	cancel context.CancelFunc
	done   chan struct{}
	paused atomic.Bool

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	connected   bool
	connects    int // connections made
	losses      int // connections that ended while the back office was running
	lastErr     error
	next        int               // the next task's number
	acked       []string          // tasks the agent acknowledged (PUBACK success), in order
	refused     map[string]byte   // tasks refused with a PUBACK reason code
	results     map[string]string // task id → status
	deadletters []deadletter
}

type deadletter struct {
	Reason  string          `json:"reason"`
	Payload json.RawMessage `json:"payload"`
}

func startBackOffice(s *system) *backOffice {
	ctx, cancel := context.WithCancel(context.Background())
	bo := &backOffice{s: s, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		refused: map[string]byte{}, results: map[string]string{}}
	go bo.run(ctx)
	return bo
}

func (bo *backOffice) stop() {
	bo.cancel()
	<-bo.done
}

// notify wakes the waiters; call it with bo.mu held.
func (bo *backOffice) notify() {
	close(bo.changed)
	bo.changed = make(chan struct{})
}

// wait returns after the next change or d, whichever comes first.
func (bo *backOffice) wait(d time.Duration) {
	bo.mu.Lock()
	ch := bo.changed
	bo.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(d):
	}
}

func (bo *backOffice) waitConnected(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		bo.mu.Lock()
		ok, err := bo.connected, bo.lastErr
		bo.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not connected after %v: %v", within, err)
		}
		bo.wait(50 * time.Millisecond)
	}
}

// pause stops submitting until resume (a task under way finishes).
func (bo *backOffice) pause()  { bo.paused.Store(true) }
func (bo *backOffice) resume() { bo.paused.Store(false) }

// run connects, submits and reconnects until ctx ends.
func (bo *backOffice) run(ctx context.Context) {
	defer close(bo.done)
	first := true
	for ctx.Err() == nil {
		c, err := bo.connect(ctx, first)
		bo.mu.Lock()
		bo.lastErr = err
		if err == nil {
			bo.connected = true
			bo.connects++
			bo.notify()
		}
		bo.mu.Unlock()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		first = false
		bo.submit(ctx, c)
		bo.mu.Lock()
		bo.connected = false
		if ctx.Err() == nil {
			bo.losses++
		}
		bo.notify()
		bo.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Disconnect(&paho.Disconnect{})
		select {
		case <-c.Done():
		case <-dctx.Done():
		}
		cancel()
	}
}

func (bo *backOffice) connect(ctx context.Context, clean bool) (*paho.Client, error) {
	conn, err := bo.s.dial()
	if err != nil {
		return nil, err
	}
	c := paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			bo.received(pr.Packet)
			return true, nil
		}},
		OnClientError: func(error) {},
	})
	expiry := uint32(3600)
	cp := &paho.Connect{ClientID: backOfficeID, KeepAlive: 30, CleanStart: clean,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	if bo.s.setup.users {
		cp.Username, cp.UsernameFlag = "backoffice", true
		cp.Password, cp.PasswordFlag = []byte(password("backoffice")), true
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Connect(cctx, cp); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	prefix := "faceagent/" + gateway + "/"
	if _, err := c.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: prefix + "results", QoS: 1}, {Topic: prefix + "deadletter", QoS: 1}}}); err != nil {
		_ = c.Disconnect(&paho.Disconnect{})
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return c, nil
}

// submit publishes one task every submitEvery until the connection or ctx ends.
func (bo *backOffice) submit(ctx context.Context, c *paho.Client) {
	tick := time.NewTicker(submitEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-tick.C:
		}
		if bo.paused.Load() {
			continue
		}
		bo.mu.Lock()
		n := bo.next
		bo.next++
		bo.mu.Unlock()
		id := fmt.Sprintf("a-%d", n)
		task := fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":{"id":"p%d","name":"Person %d"}}`,
			id, terminals[n%len(terminals)], n, n)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Publish(pctx, &paho.Publish{Topic: "faceagent/" + gateway + "/tasks", QoS: 1, Payload: []byte(task)})
		cancel()
		bo.mu.Lock()
		switch {
		case err == nil:
			bo.acked = append(bo.acked, id)
		case resp != nil:
			bo.refused[id] = resp.ReasonCode
		default:
			bo.lastErr = err
		}
		bo.notify()
		bo.mu.Unlock()
		if err != nil && resp == nil {
			return // the connection failed: reconnect (the task counts as not acknowledged)
		}
	}
}

func (bo *backOffice) received(p *paho.Publish) {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	defer bo.notify()
	switch p.Topic {
	case "faceagent/" + gateway + "/results":
		var r struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		}
		if json.Unmarshal(p.Payload, &r) == nil {
			bo.results[r.TaskID] = r.Status
		}
	case "faceagent/" + gateway + "/deadletter":
		var d deadletter
		if json.Unmarshal(p.Payload, &d) == nil {
			bo.deadletters = append(bo.deadletters, d)
		}
	}
}

// lossCount is how many of the back office's connections ended under it.
func (bo *backOffice) lossCount() int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return bo.losses
}

// waitDrained waits until every task acknowledged so far has its result.
func (bo *backOffice) waitDrained(t *testing.T) {
	t.Helper()
	acked := bo.ackedTasks()
	deadline := time.Now().Add(resultDeadline)
	for missing := bo.missingResults(acked); len(missing) > 0; missing = bo.missingResults(acked) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged tasks have no result after %v", len(missing), len(acked), resultDeadline)
		}
		bo.wait(100 * time.Millisecond)
	}
}

func (bo *backOffice) resultCount() int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return len(bo.results)
}

func (bo *backOffice) ackedTasks() []string {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return append([]string(nil), bo.acked...)
}

// refusals returns how many tasks were refused with code.
func (bo *backOffice) refusals(code byte) int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	n := 0
	for _, c := range bo.refused {
		if c == code {
			n++
		}
	}
	return n
}

func (bo *backOffice) missingResults(ids []string) []string {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	var missing []string
	for _, id := range ids {
		if _, ok := bo.results[id]; !ok {
			missing = append(missing, id)
		}
	}
	return missing
}

// deadlettersSince returns the deadletters received after the first n.
func (bo *backOffice) deadlettersSince(n int) []deadletter {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	if n > len(bo.deadletters) {
		return nil
	}
	return append([]deadletter(nil), bo.deadletters[n:]...)
}

func (bo *backOffice) deadletterCount() int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return len(bo.deadletters)
}

// waitDeadletters waits until n deadletters came after the first from.
func (bo *backOffice) waitDeadletters(from, n int, within time.Duration) ([]deadletter, error) {
	deadline := time.Now().Add(within)
	for {
		got := bo.deadlettersSince(from)
		if len(got) >= n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, errors.New("deadletters missing")
		}
		bo.wait(100 * time.Millisecond)
	}
}
