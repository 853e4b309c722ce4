package store

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestLateResponseAfterTimeout: a response that comes after its request timed out is
// dropped, even while a newer request (which may reuse the pooled call of the old one) is
// waiting; the newer request gets its own response, and nothing is left pending.
func TestLateResponseAfterTimeout(t *testing.T) {
	m, r := mosquittoStore(t)
	c := connect(t, m.URL, nil)
	ctx := ctxT(t)

	// A second connection answers in place of the responder, in an order the test chooses.
	u, _ := url.Parse(m.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	answerer := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
	if _, err := answerer.Connect(ctx, &paho.Connect{ClientID: "answerer", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = answerer.Disconnect(&paho.Disconnect{}); <-answerer.Done() })
	answer := func(req *paho.Publish, payload string) {
		t.Helper()
		_, err := answerer.Publish(ctx, &paho.Publish{QoS: 1, Topic: req.Properties.ResponseTopic, Payload: []byte(payload),
			Properties: &paho.PublishProperties{CorrelationData: req.Properties.CorrelationData,
				User: paho.UserProperties{{Key: "__stat", Value: "200"}, {Key: "__protVer", Value: "1.0"}}}})
		if err != nil {
			t.Fatal(err)
		}
	}

	r.SetHold(true)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Get(short, "k")
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("held request: %v, want ErrTimeout", err)
	}
	<-r.Held()
	late := r.Last()

	type reply struct {
		e   Entry
		err error
	}
	done := make(chan reply, 1)
	go func() {
		e, err := c.Get(ctx, "k")
		done <- reply{e, err}
	}()
	<-r.Held()
	waiting := r.Last()
	answer(late, "$5\r\nstale\r\n")
	answer(waiting, "$5\r\nfresh\r\n")
	got := <-done
	if got.err != nil || string(got.e.Value) != "fresh" {
		t.Fatalf("waiting request got %q, %v; want its own response", got.e.Value, got.err)
	}
	c.mu.Lock()
	left := len(c.pending)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d calls left pending", left)
	}
}
