package testutil

import (
	"slices"
	"sync"
	"time"
)

// FakeClock is a clock whose time moves only in Advance, which runs the timers that come
// due in the caller's goroutine, in time order: a test decides exactly when each timer
// fires. Packages whose Clock interface returns their own Timer type wrap it with an
// AfterFunc of that type.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*FakeTimer
}

// FakeTimer is a timer of a FakeClock.
type FakeTimer struct {
	c    *FakeClock
	at   time.Time
	f    func()
	done bool
}

// NewFakeClock returns a FakeClock at a fixed instant.
func NewFakeClock() *FakeClock { return NewFakeClockAt(time.Unix(1_700_000_000, 0)) }

// NewFakeClockAt returns a FakeClock at now.
func NewFakeClockAt(now time.Time) *FakeClock { return &FakeClock{now: now} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that runs f once Advance passes d from now.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) *FakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &FakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop disarms t; it reports whether t had not fired or been stopped yet.
func (t *FakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves time forward by d, firing every timer that comes due, in time order (a
// timer armed by one that fires is run too if it comes due within d).
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *FakeTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.timers = slices.DeleteFunc(c.timers, func(t *FakeTimer) bool { return t.done })
			c.mu.Unlock()
			return
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// Armed counts the timers that have neither fired nor been stopped.
func (c *FakeClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}
