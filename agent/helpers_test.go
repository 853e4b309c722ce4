package agent

import (
	"testing"
	"time"
)

// poke signals c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waitFor waits for cond, checked again on every poke of ev.
func waitFor(t *testing.T, what string, cond func() bool, ev <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
