package broker

import "sync/atomic"

// healthSignal tells the function OnHealthChanged set that Healthy or SessionsErr may
// answer differently now: Accept began failing or accepts again, the sessions journal
// began refusing writes or takes them again, or a failing Accept went stale (acceptStale
// with no accept since: Healthy turns nil).
type healthSignal struct {
	fn atomic.Pointer[func()]
}

// changed calls the function, if any, on the caller's goroutine. A nil signal ignores it.
func (h *healthSignal) changed() {
	if h == nil {
		return
	}
	if fn := h.fn.Load(); fn != nil {
		(*fn)()
	}
}

// OnHealthChanged sets the function told when Healthy or SessionsErr may answer
// differently (nil: none): Accept began failing or accepts again, the sessions journal
// began refusing writes or takes them again. It is called on the broker's goroutines,
// with no lock held; it must not block. A failing Accept that ends without a connection
// (Healthy turns nil acceptStale after the last failure) is told then too.
func (b *Broker) OnHealthChanged(fn func()) {
	if fn == nil {
		b.health.fn.Store(nil)
		return
	}
	b.health.fn.Store(&fn)
}
