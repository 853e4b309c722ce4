package store

import (
	"errors"
	"testing"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// TestNoResponderFailsAtOnce: behind mosquitto a request that no store is subscribed to gets
// PUBACK 0x10 (no matching subscribers). It fails at once with ErrNoResponder, which is
// Retryable, rather than wait out its whole timeout. After a broker restart the client can
// resume its watches before the store has subscribed again: this is what lets it retry at
// once instead of a timeout later (TestBrokerRestart).
func TestNoResponderFailsAtOnce(t *testing.T) {
	m := testutil.StartMosquitto(t)
	c := connect(t, m.URL, nil)
	// ErrTimeout, not ErrNoResponder, when the client waits for an answer that cannot come.
	if _, err := c.Get(ctxT(t), "k"); !errors.Is(err, ErrNoResponder) || !Retryable(err) {
		t.Fatalf("Get with no store behind the broker: %v, want ErrNoResponder", err)
	}
}
