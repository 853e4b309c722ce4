package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestRequestPropertiesLikeTheSDKs(t *testing.T) {
	m, r := mosquittoStore(t)
	c := connect(t, m.URL, func(o *Options) { o.ClientID = "props-client"; o.Timeout = 3 * time.Second })
	ft := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "lease"}
	if _, err := c.Set(ctxT(t), "k", []byte("v"), &SetOptions{FencingToken: ft, Persist: true}); err != nil {
		t.Fatal(err)
	}
	p := r.Last()
	pp := p.Properties
	if p.QoS != 1 || p.Topic != invokeTopic {
		t.Errorf("qos %d topic %q", p.QoS, p.Topic)
	}
	if want := "clients/props-client/services/statestore/_any_/command/invoke/response"; pp.ResponseTopic != want {
		t.Errorf("response topic %q, want %q", pp.ResponseTopic, want)
	}
	if len(pp.CorrelationData) != 16 || pp.CorrelationData[6]>>4 != 4 {
		t.Errorf("correlation data %x is not a v4 UUID", pp.CorrelationData)
	}
	if pp.MessageExpiry == nil || *pp.MessageExpiry != 3 {
		t.Errorf("message expiry %v, want 3", pp.MessageExpiry)
	}
	if pp.ContentType != "application/octet-stream" {
		t.Errorf("content type %q", pp.ContentType)
	}
	for k, want := range map[string]string{"__protVer": "1.0", "__srcId": "props-client", "$partition": "props-client",
		"__ft": ft.String(), "aio-persistence": "true"} {
		if got := pp.User.Get(k); got != want {
			t.Errorf("user property %s = %q, want %q", k, got, want)
		}
	}
	if _, err := hlc.ParseString(pp.User.Get("__ts")); err != nil {
		t.Errorf("__ts %q: %v", pp.User.Get("__ts"), err)
	}
}

func TestOperationsThroughMosquitto(t *testing.T) {
	m, _ := mosquittoStore(t)
	c := connect(t, m.URL, nil)
	testOperations(t, c)
}

// testOperations runs every operation and option; it is shared by the mosquitto+responder and
// the embedded-store suites.
func testOperations(t *testing.T, c *Client) {
	ctx := ctxT(t)
	if _, err := c.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GET missing: %v, want ErrNotFound", err)
	}
	v1, err := c.Set(ctx, "k", []byte("one"), nil)
	if err != nil || v1.IsZero() {
		t.Fatalf("SET: %v %v", v1, err)
	}
	e, err := c.Get(ctx, "k")
	if err != nil || string(e.Value) != "one" || hlc.Compare(e.Version, v1) != 0 {
		t.Fatalf("GET: %q %v %v, want one %v", e.Value, e.Version, err, v1)
	}
	// Every later request's __ts is after the versions seen: the shared clock observed them.
	if now := c.Clock().Now(); hlc.Compare(now, v1) <= 0 {
		t.Errorf("clock %v not after observed version %v", now, v1)
	}
	// Empty values are legal (wire fact 12).
	if _, err := c.Set(ctx, "empty", nil, nil); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Get(ctx, "empty"); err != nil || len(e.Value) != 0 || e.Version.IsZero() {
		t.Fatalf("GET empty: %q %v %v", e.Value, e.Version, err)
	}
	// NX
	if v, err := c.Set(ctx, "k", []byte("two"), &SetOptions{Condition: NotExists}); !errors.Is(err, ErrNotApplied) || hlc.Compare(v, v1) != 0 {
		t.Fatalf("SET NX on existing: %v %v, want ErrNotApplied with %v", v, err, v1)
	}
	if _, err := c.Set(ctx, "nx", []byte("x"), &SetOptions{Condition: NotExists}); err != nil {
		t.Fatalf("SET NX on missing: %v", err)
	}
	// NEX: same value renews, another value is refused.
	v2, err := c.Set(ctx, "k", []byte("one"), &SetOptions{Condition: NotExistsOrEqual})
	if err != nil || hlc.Compare(v2, v1) <= 0 {
		t.Fatalf("SET NEX same value: %v %v", v2, err)
	}
	if _, err := c.Set(ctx, "k", []byte("other"), &SetOptions{Condition: NotExistsOrEqual}); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("SET NEX other value: %v", err)
	}
	// PX: the key goes away; watch for the DELETE instead of sleeping.
	w, err := c.KeyNotify(ctx, "px")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, "px", []byte("soon gone"), &SetOptions{Expiry: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n := next(t, w); n.Op != OpSet || string(n.Value) != "soon gone" || n.Key != "px" {
		t.Fatalf("first notification %+v", n)
	}
	if n := next(t, w); n.Op != OpDelete {
		t.Fatalf("after expiry: %+v, want DELETE", n)
	}
	if _, err := c.Get(ctx, "px"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GET expired: %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.C(); ok {
		t.Fatal("channel open after Stop")
	}
	if err := c.KeyNotifyStop(ctx, "px"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("KEYNOTIFY STOP of an unwatched key: %v, want ErrNotFound", err)
	}
	// VDEL
	if _, err := c.VDel(ctx, "k", []byte("wrong"), nil); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("VDEL wrong value: %v", err)
	}
	if v, err := c.VDel(ctx, "k", []byte("one"), nil); err != nil || hlc.Compare(v, v2) != 0 {
		t.Fatalf("VDEL: %v %v, want %v", v, err, v2)
	}
	if _, err := c.VDel(ctx, "k", []byte("one"), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("VDEL missing: %v", err)
	}
	// DEL
	if _, err := c.Del(ctx, "nx", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Del(ctx, "nx", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DEL missing: %v", err)
	}
	// Fencing tokens on SET, DEL and VDEL.
	tok := c.Clock().Now()
	if _, err := c.Set(ctx, "fenced", []byte("a"), &SetOptions{FencingToken: tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, "fenced", []byte("b"), nil); !errors.Is(err, ErrFencingTokenRequired) {
		t.Fatalf("SET without token: %v", err)
	}
	old := hlc.Timestamp{Wall: tok.Wall - 1000, Node: tok.Node}
	if _, err := c.Set(ctx, "fenced", []byte("b"), &SetOptions{FencingToken: old}); !errors.Is(err, ErrFencingTokenLowerVersion) {
		t.Fatalf("SET with old token: %v", err)
	}
	if _, err := c.Del(ctx, "fenced", nil); !errors.Is(err, ErrFencingTokenRequired) {
		t.Fatalf("DEL without token: %v", err)
	}
	if _, err := c.VDel(ctx, "fenced", []byte("a"), &DelOptions{FencingToken: old}); !errors.Is(err, ErrFencingTokenLowerVersion) {
		t.Fatalf("VDEL with old token: %v", err)
	}
	if _, err := c.Del(ctx, "fenced", &DelOptions{FencingToken: tok}); err != nil {
		t.Fatalf("DEL with token: %v", err)
	}
	// Errors
	if _, err := c.Get(ctx, ""); !errors.Is(err, ErrKeyLengthZero) {
		t.Fatalf("GET empty key: %v", err)
	}
	// Persist is accepted.
	if _, err := c.Set(ctx, "persisted", []byte("p"), &SetOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
}

func TestErrorTextsMapToSentinels(t *testing.T) {
	m, _ := mosquittoStore(t)
	c := connect(t, m.URL, nil)
	for _, want := range knownServerErrors {
		_, err := c.Get(ctxT(t), "error:"+want.Text)
		if !errors.Is(err, want) {
			t.Errorf("%q: got %v", want.Text, err)
		}
	}
	// The protocol document's spelling.
	if _, err := c.Get(ctxT(t), "error:"+lowerVersionThat); !errors.Is(err, ErrFencingTokenLowerVersion) {
		t.Errorf("document spelling: %v", err)
	}
	_, err := c.Get(ctxT(t), "error:a brand new failure")
	var se *ServerError
	if !errors.As(err, &se) || se.Text != "a brand new failure" || errors.Is(err, ErrSyntax) {
		t.Errorf("unknown text: %v", err)
	}
}

func TestServerErrorParsing(t *testing.T) {
	for line, want := range map[string]error{
		"ERR syntax error":        ErrSyntax,
		"ERR: syntax error":       ErrSyntax, // the document's form
		"ERR not authorized":      ErrNotAuthorized,
		"ERR " + lowerVersionThat: ErrFencingTokenLowerVersion,
	} {
		if err := serverError([]byte(line)); !errors.Is(err, want) {
			t.Errorf("%q → %v, want %v", line, err, want)
		}
	}
	if err := serverError([]byte("WRONGTYPE x")); err.(*ServerError).Text != "WRONGTYPE x" {
		t.Errorf("foreign error: %v", err)
	}
}

func TestThousandConcurrentRequestsOnOneConnection(t *testing.T) {
	m, _ := mosquittoStore(t)
	c := connect(t, m.URL, func(o *Options) { o.Timeout = 30 * time.Second })
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, val := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
			if _, err := c.Set(ctx, key, []byte(val), nil); err != nil {
				errs <- fmt.Errorf("SET %s: %w", key, err)
				return
			}
			e, err := c.Get(ctx, key)
			if err != nil || string(e.Value) != val {
				errs <- fmt.Errorf("GET %s = %q, %v", key, e.Value, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c.mu.Lock()
	left := len(c.pending)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d calls left pending", left)
	}
}

func TestTimeout(t *testing.T) {
	m, r := mosquittoStore(t)
	c := connect(t, m.URL, nil)
	r.SetHold(true)
	start := time.Now()
	_, err := c.Set(ctxT(t), "k", []byte("v"), &SetOptions{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !Retryable(err) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
	// A caller's cancel is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestNotConnected(t *testing.T) {
	c, err := New(&Options{URL: "mqtt://" + testutil.FreeAddr(t), ReconnectMin: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(ctxT(t), "k"); !errors.Is(err, ErrNotConnected) || !Retryable(err) {
		t.Fatalf("got %v, want ErrNotConnected", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady: %v", err)
	}
	c.Close()
	if _, err := c.Get(ctxT(t), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{URL: "http://x"}, {URL: "mqtt://%zz"}, {ClientID: "a+b"}} {
		if c, err := New(&o); err == nil {
			c.Close()
			t.Errorf("%+v accepted", o)
		}
	}
}
