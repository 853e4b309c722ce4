package store

import (
	"context"
	"github.com/seed0e69bba5/faceagent/agent/store/storetest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestMain(m *testing.M) {
	if serveChild() {
		return // this process was a benchmark's broker
	}
	goleak.VerifyTestMain(m)
}

// connect opens a client to url with short timeouts and closes it when the test ends.
func connect(t testing.TB, url string, mod func(*Options)) *Client {
	t.Helper()
	o := &Options{URL: url, Timeout: 5 * time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	if mod != nil {
		mod(o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, o)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mosquittoStore starts mosquitto and the test responder behind it.
func mosquittoStore(t testing.TB) (*testutil.Mosquitto, *storetest.Responder) {
	m := testutil.StartMosquitto(t)
	return m, storetest.Start(t, m.URL)
}

// next waits for one notification.
func next(t testing.TB, w *Watch) Notification {
	t.Helper()
	return nextWithin(t, w, 10*time.Second)
}

func nextWithin(t testing.TB, w *Watch, d time.Duration) Notification {
	t.Helper()
	select {
	case n, ok := <-w.C():
		if !ok {
			t.Fatal("watch channel closed")
		}
		return n
	case <-time.After(d):
		t.Fatalf("no notification for %q", w.Key())
	}
	return Notification{}
}
