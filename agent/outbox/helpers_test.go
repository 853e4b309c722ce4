package outbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is a Clock whose time moves only in Advance, which runs due timers in the
// caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// Advance moves time forward by d, firing every timer that comes due, in time order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.done && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.done })
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

// armed counts timers that have not fired or been stopped.
func (c *fakeClock) armed() int {
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

// recSender records every command it is asked to send.
type recSender struct {
	mu   sync.Mutex
	sent chan Command
	all  []Command
	fail error
}

func newRecSender() *recSender { return &recSender{sent: make(chan Command, 100_000)} }

func (s *recSender) Send(ctx context.Context, deviceID string, cmd Command) error {
	s.mu.Lock()
	s.all = append(s.all, cmd)
	err := s.fail
	s.mu.Unlock()
	s.sent <- cmd
	return err
}

// next waits for the next Send (the decision was taken synchronously; the call itself runs
// on its own goroutine).
func (s *recSender) next(t *testing.T) Command {
	t.Helper()
	select {
	case c := <-s.sent:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no command was sent")
		return Command{}
	}
}

func (s *recSender) drain() {
	for {
		select {
		case <-s.sent:
		default:
			return
		}
	}
}

// nbRecSender is a recSender that declares its sends non-blocking (NonBlockingSender):
// the outbox then calls Send on the deciding goroutine after unlocking.
type nbRecSender struct{ *recSender }

func (nbRecSender) SendsWithoutBlocking(string) bool { return true }

type env struct {
	t     *testing.T
	dir   string
	clock *fakeClock
	snd   *recSender
	nb    bool // open with nbRecSender
	opts  Options
	o     *Outbox
}

func newEnv(t *testing.T, opts Options) *env { return newEnvSender(t, opts, false) }

// newEnvSender is newEnv with the sender declared non-blocking when nonBlocking is set.
func newEnvSender(t *testing.T, opts Options, nonBlocking bool) *env {
	e := &env{t: t, dir: t.TempDir(), clock: newFakeClock(), snd: newRecSender(), opts: opts, nb: nonBlocking}
	e.opts.Clock = e.clock
	if e.opts.Seed == 0 {
		e.opts.Seed = 1
	}
	e.open()
	t.Cleanup(func() { e.o.Close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	var snd Sender = e.snd
	if e.nb {
		snd = nbRecSender{e.snd}
	}
	o, err := Open(e.dir, snd, &e.opts)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.o = o
}

func (e *env) restart() {
	e.t.Helper()
	if err := e.o.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.snd.drain()
	e.open()
}

func (e *env) enqueue(id, dev, person string) {
	e.t.Helper()
	if err := e.o.Enqueue(Task{MessageID: id, TaskID: "t-" + id, DeviceID: dev, Op: "AddPerson", PersonID: person, Payload: []byte(`{"id":"` + person + `"}`)}); err != nil {
		e.t.Fatalf("Enqueue %s: %v", id, err)
	}
}

func (e *env) status(dev string) DeviceStatus {
	st, _ := e.o.DeviceStatus(dev)
	return st
}

func (e *env) expectSend(id string, try int) {
	e.t.Helper()
	c := e.snd.next(e.t)
	if c.MessageID != id || c.Try != try {
		e.t.Fatalf("sent %s try %d, want %s try %d", c.MessageID, c.Try, id, try)
	}
}

func (e *env) results() []Result {
	e.t.Helper()
	r, err := e.o.Results(1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// faultFS fails writes with ENOSPC once its budget is spent.
type faultFS struct {
	journal.OSFS
	mu     sync.Mutex
	budget int64
}

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{file, f}, nil
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	n := int64(len(p))
	if f.fs.budget >= 0 {
		n = min(n, f.fs.budget)
		f.fs.budget -= n
	}
	f.fs.mu.Unlock()
	w, err := f.File.WriteAt(p[:n], off)
	if err == nil && w < len(p) {
		err = &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return w, err
}

var _ = errors.Is
