package broker

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The SIGKILL tests of the broker run it as a child process (testutil.CrashChild): the test
// binary again, with an environment variable ("dir addr") that makes an init function run
// the broker instead of the tests. init, not TestMain: the package's TestMain is goleak's,
// and the child has nothing to check.

// runBrokerChild runs the child broker when the environment variable env is set, and
// returns at once when it is not: a broker with DataDir dir listening on addr, prepared by
// prepare (nil: nothing to do) before it starts, that says "ready" when a network client
// publishes on readyTopic, and serves until the parent kills it. It exits with status 3 if
// the broker does not start.
func runBrokerChild(env, readyTopic string, o Options, prepare func(*Broker) error) {
	v := os.Getenv(env)
	if v == "" {
		return
	}
	dir, addr, _ := strings.Cut(v, " ")
	o.Listen, o.DataDir, o.AllowAnonymous = addr, dir, true
	b, err := New(&o)
	if err == nil && prepare != nil {
		err = prepare(b)
	}
	if err == nil {
		err = b.AddHook(&readyOnTopic{topic: readyTopic}, nil)
	}
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, env+":", err)
		os.Exit(3)
	}
	select {} // until the SIGKILL
}

// killBrokerChild runs the child broker of env (runBrokerChild) on a new DataDir and a free
// address while workload drives it from another goroutine, SIGKILLs it killAfter after it
// said "ready" (within readyTimeout), and, once workload has returned, returns the DataDir
// and workload's error. A line the child says after "ready" fails t.
func killBrokerChild(t *testing.T, env string, readyTimeout, killAfter time.Duration, workload func(addr string) error) (dir string, err error) {
	t.Helper()
	dir = t.TempDir()
	addr := testutil.FreeAddr(t)
	done := make(chan error, 1)
	go func() { done <- workload(addr) }()
	testutil.CrashChild(t, []string{env + "=" + dir + " " + addr}, readyTimeout, killAfter, func(l string) {
		t.Errorf("child said %q", l)
	})
	return dir, <-done
}

// readyOnTopic says "ready" when a network client publishes on topic.
type readyOnTopic struct {
	mqtt.HookBase
	topic string
	once  sync.Once
}

func (h *readyOnTopic) ID() string           { return "test-ready-on-topic" }
func (h *readyOnTopic) Provides(b byte) bool { return b == mqtt.OnPublish }
func (h *readyOnTopic) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !cl.Net.Inline && pk.TopicName == h.topic {
		h.once.Do(func() { fmt.Println("ready") })
	}
	return pk, nil
}
