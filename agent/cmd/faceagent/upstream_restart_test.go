package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The upstream broker killed (SIGKILL) and restarted mid-run: nothing is lost. The upstream is a
// second faceagent running only its embedded broker and state store, so the back office's
// persistent session survives the restart there (a restarted mosquitto without persistence
// would drop the results published before the back office subscribed again). The gateway
// has its own broker for the terminals and the upstream for tasks, results and state.
// While the upstream is down, dispatch goes on; after the restart the gateway reconnects,
// takes the tasks published since, and the back office gets a result for every task —
// those finished during the outage were kept in the journal until the upstream took them.
func TestUpstreamBrokerRestartMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the upstream broker")
	}
	const (
		gw    = "gw-u"
		total = 2000
		batch = 50
	)
	ids := []string{"u1", "u2", "u3", "u4"}
	dir := memDir(t) // the back office's persistent session: sessions journal fsyncs
	upAddr := testutil.FreeAddr(t)
	upCfg := writeFile(t, dir, "upstream.toml", fmt.Sprintf("[agent]\ndata_dir = %q\n[broker]\nlisten = %q\n",
		filepath.Join(dir, "upstream"), upAddr))
	up := startAgent(t, upCfg)
	up.waitLog(runningRe, 0)

	gwAddr := testutil.FreeAddr(t)
	cfg := fmt.Sprintf("[agent]\ngateway_id = %q\ndata_dir = %q\n[broker]\nlisten = %q\n"+
		"[upstream]\nurl = \"mqtt://%s\"\nsession_expiry = \"1h\"\nreconnect_max = \"300ms\"\n"+
		"[store]\nrequest_timeout = \"200ms\"\n[dispatch]\nretry_interval = \"3s\"\nheartbeat_timeout = \"2s\"\n",
		gw, filepath.Join(dir, "gateway"), gwAddr, upAddr)
	for _, id := range ids {
		cfg += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	connected := regexp.MustCompile(`msg="upstream connected"`)
	p := startAgent(t, writeFile(t, dir, "gateway.toml", cfg))
	p.waitLog(connected, 0)
	fleet := startStrictFleet(t, "mqtt://"+gwAddr, ids, 15, 3*time.Millisecond)
	defer fleet.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bo := &resultCollector{results: map[string]string{}, reportedIn: map[string]int{}, changed: make(chan struct{}, 1)}
	bo.connect(ctx, t, upAddr, gw, 0)
	publish := func(from, to int) {
		for next := from; next < to; next += batch {
			var b strings.Builder
			b.WriteByte('[')
			for i := next; i < next+batch; i++ {
				if i > next {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"taskId":"u-%d","deviceId":%q,"op":"AddPerson","person":{"id":"p%d"}}`, i, ids[i%len(ids)], i)
			}
			b.WriteByte(']')
			if _, err := bo.c.Publish(ctx, &paho.Publish{Topic: "faceagent/" + gw + "/tasks", QoS: 1, Payload: []byte(b.String())}); err != nil {
				t.Fatalf("publish tasks %d..: %v", next, err)
			}
		}
	}
	waitResults := func(n int) {
		t.Helper()
		for bo.count() < n {
			select {
			case <-bo.changed:
			case <-ctx.Done():
				bo.mu.Lock()
				var missing []string
				for i := 0; i < n && len(missing) < 10; i++ {
					if _, ok := bo.results[fmt.Sprintf("u-%d", i)]; !ok {
						missing = append(missing, fmt.Sprintf("u-%d", i))
					}
				}
				bo.mu.Unlock()
				t.Fatalf("%d of %d results; missing %v\ngateway:\n%s\nupstream:\n%s", bo.count(), n, missing, p.log(), up.log())
			}
		}
	}
	persons := func() int {
		n := 0
		for _, id := range ids {
			n += len(fleet.Terminal(id).Persons())
		}
		return n
	}

	publish(0, total/2)
	waitResults(total / 8)
	// A crash: our copy of mochi acknowledges a publish only once it is stored for the
	// back office's kept session (third_party/mochi, c8d03c1), so a SIGKILL loses nothing
	// the reporter was told was taken.
	up.stop(syscall.SIGKILL)
	<-bo.c.Done()
	resultsAtKill := bo.count()
	// Dispatch does not wait for the upstream: the terminals keep getting commands.
	mark := p.lineCount()
	before := persons()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for persons() < before+100 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("dispatch stalled while the upstream was down: %d persons, %d before", persons(), before)
		}
	}
	duringOutage := persons() - before
	up = startAgent(t, upCfg)
	up.waitLog(runningRe, 0)
	bo.connect(ctx, t, upAddr, gw, 1)
	p.waitLog(connected, mark)
	publish(total/2, total)
	waitResults(total)

	bo.mu.Lock()
	afterRestart := 0
	for _, life := range bo.reportedIn {
		afterRestart += life
	}
	t.Logf("%d results before the upstream stopped, %d persons applied during the outage; %d results arrived after the restart",
		resultsAtKill, duringOutage, afterRestart)
	for i := range total {
		if got := bo.results[fmt.Sprintf("u-%d", i)]; got != "succeeded" {
			t.Errorf("task u-%d: result %q", i, got)
		}
	}
	bo.mu.Unlock()
	for d, id := range ids {
		if got, want := len(fleet.Terminal(id).Persons()), total/len(ids); got != want {
			t.Errorf("terminal %s (#%d): %d persons, want %d", id, d, got, want)
		}
	}
	if err := fleet.Violations(); err != nil {
		t.Errorf("strict terminals: %v", err)
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("gateway SIGTERM: exit %d\n%s", code, p.log())
	}
	if code := up.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("upstream SIGTERM: exit %d\n%s", code, up.log())
	}
	<-bo.c.Done()
}
