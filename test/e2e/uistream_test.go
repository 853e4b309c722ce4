package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/ui"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// pageStream is the operator page's live stream (GET /api/events) read as the browser
// reads it: each "state" event decoded into the ui package's own State.
type pageStream struct {
	t      *testing.T
	states chan ui.State
}

func openPageStream(t *testing.T, addr string) *pageStream {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/events: %s", resp.Status)
	}
	s := &pageStream{t: t, states: make(chan ui.State, 64)}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.states)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var st ui.State
			if err := json.Unmarshal([]byte(data), &st); err != nil {
				t.Errorf("a state event: %v: %s", err, data)
				return
			}
			s.states <- st
		}
	}()
	return s
}

// waitState waits at most d for a state event matching want.
func (s *pageStream) waitState(what string, d time.Duration, want func(ui.State) bool) time.Duration {
	s.t.Helper()
	start := time.Now()
	deadline := time.After(d)
	for {
		select {
		case st, ok := <-s.states:
			if !ok {
				s.t.Fatalf("the stream ended before %s", what)
			}
			if want(st) {
				return time.Since(start)
			}
		case <-deadline:
			s.t.Fatalf("no state event showed %s within %v", what, d)
		}
	}
}

// The page hears of the upstream link going down and coming back from the link itself:
// each shows on the live stream within three seconds, not at the next terminal event or
// the stream's keep-alive (25 s). The terminals' links are on the embedded broker and no
// terminal is there, so nothing else changes.
func TestOperatorPageFollowsUpstream(t *testing.T) {
	m := testutil.StartMosquitto(t)
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-us\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[upstream]\nurl = %q\nreconnect_max = \"300ms\"\n"+
		"[store]\nrequest_timeout = \"200ms\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[ui]\nlisten = \"127.0.0.1:0\"\n"+
		"[[devices]]\nid = \"u1\"\n", t.TempDir(), m.URL)
	_, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	waitUpstream(t, a)
	s := openPageStream(t, a.UIAddr())
	upstream := func(want string) func(ui.State) bool {
		return func(st ui.State) bool { return st.Health.Upstream == want }
	}
	s.waitState("upstream connected", 3*time.Second, upstream("connected"))
	m.Stop()
	took := s.waitState("upstream disconnected", 3*time.Second, upstream("disconnected"))
	t.Logf("the page showed the upstream link down %v after the broker stopped", took)
	m.Restart()
	took = s.waitState("upstream connected again", 5*time.Second, upstream("connected"))
	t.Logf("the page showed the upstream link back %v after the broker restarted", took)
}

// A failed command held for "retry failed" leaves the page when its failed_retention is
// over: the purge tells the page like the control calls do, not at the stream's next
// keep-alive (25 s). Nothing else happens meanwhile: the terminal is configured without
// heartbeats and never connects, so its one command fails unacked and no event follows.
func TestOperatorPageDropsFailuresAfterRetention(t *testing.T) {
	const retention = time.Second
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-fr\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nmax_tries = 1\nretry_interval = \"50ms\"\nfailed_retention = %q\n"+
		"[ui]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"f1\"\nheartbeat = false\n", t.TempDir(), retention.String())
	addr, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	s := openPageStream(t, a.UIAddr())
	bo := connectBackOffice(t, addr, "gw-fr")
	bo.publish("faceagent/gw-fr/tasks", []byte(`{"taskId":"t-1","deviceId":"f1","op":"AddPerson","person":{"id":"1"}}`))
	bo.waitFor("the result of t-1", 10*time.Second, func() bool { _, ok := bo.results["t-1"]; return ok })
	held := func(n int) func(ui.State) bool {
		return func(st ui.State) bool {
			return st.FailuresHeld == n && len(st.Terminals) == 1 && st.Terminals[0].FailedHeld == n
		}
	}
	s.waitState("the failure held", 5*time.Second, held(1))
	took := s.waitState("the failure purged", retention+3*time.Second, held(0))
	t.Logf("the page dropped the failure %v after it showed it (failed_retention %v)", took, retention)
}
