package outbox

import (
	"context"
	"errors"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
	"io/fs"
	"os"
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

// fakeClock is the shared fake clock (internal/testutil) as the outbox's Clock.
type fakeClock struct{ *testutil.FakeClock }

func newFakeClock() *fakeClock { return &fakeClock{testutil.NewFakeClock()} }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer { return c.FakeClock.AfterFunc(d, f) }

// armed counts timers that have not fired or been stopped.
func (c *fakeClock) armed() int { return c.Armed() }

// recSender records every command it is asked to send.
type recSender struct {
	mu   sync.Mutex
	sent chan Command
	all  []Command
	fail error
	// during, when set, runs inside each Send (what happens while the command is on its
	// way); a non-nil error it returns is the Send's.
	during func(Command) error
}

func newRecSender() *recSender { return &recSender{sent: make(chan Command, 100_000)} }

func (s *recSender) Send(ctx context.Context, deviceID string, cmd Command) error {
	s.mu.Lock()
	s.all = append(s.all, cmd)
	err, during := s.fail, s.during
	s.mu.Unlock()
	if during != nil {
		if e := during(cmd); e != nil {
			err = e
		}
	}
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
