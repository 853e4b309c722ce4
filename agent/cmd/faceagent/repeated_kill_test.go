package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The fault run: SIGKILL the agent five times during a 10,000-task run and start it
// again each time. The kills fall at spread points of the run (every sixth of the results),
// with tasks queued for every terminal and commands in flight. Then:
//   - every task has a result (a back office with a persistent session on the embedded
//     broker collects them across the kills), succeeded — or superseded, for an add whose
//     person a later task deletes;
//   - every terminal's final whitelist equals the expected set (adds, minus deletes);
//   - strict terminals never saw two commands in flight;
//   - the only command a terminal receives twice is the one in flight at a kill: an
//     observer on dev/face/+ records, per terminal and in order, which messageIds the
//     agent sent in which of its lives. A repeat may only open a life (the first command
//     of life n sent to the terminal), must be the last command the terminal was sent
//     before the kill, and must not have had its result at the back office before the
//     kill: at most one repeat per terminal per kill. The agent writes its journal's
//     queued records (the send, the previous command's finish) to the file before each
//     send (agent/dispatch.go, journal.WriteOut), and a SIGKILL keeps what was written;
//   - the terminals agree: each counted at most one duplicate per kill.
//
// The agent's data lives on tmpfs when there is room: a SIGKILL keeps what the process
// wrote whether or not it was fsynced, so tmpfs changes nothing the test checks, and the
// back office's persistent session costs fsyncs of the broker's sessions journal on a disk
// (docs/benchmarks.md), which made this run several times slower.
func TestRepeatedSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the agent five times during 10,000 tasks")
	}
	const (
		gw     = "gw-r"
		total  = 10000
		batch  = 50   // tasks per upstream message
		window = 1600 // tasks published but without a result: keeps queues filled at a kill
		kills  = 5
	)
	ids := []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"}
	start := time.Now()
	dir := memDir(t)
	addr := testutil.FreeAddr(t)
	// The retry interval is far above the terminals' 1ms acks, so a resend within one life
	// of the agent would be a bug, not bad luck: only a kill may cause a repeat.
	cfgPath := writeEmbeddedConfig(t, dir, gw, addr, ids, 3*time.Second, "[journal]\nsync = \"batch\"\n")
	p := startAgent(t, cfgPath)
	p.waitLog(runningRe, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	obs := &commandObserver{seen: map[string][]observed{}}
	obs.connect(ctx, t, addr, 0)
	fleet := startStrictFleet(t, "mqtt://"+addr, ids, 12, time.Millisecond)
	defer fleet.Close()
	bo := &resultCollector{results: map[string]string{}, reportedIn: map[string]int{}, changed: make(chan struct{}, 1)}
	bo.connect(ctx, t, addr, gw, 0)

	// Task i goes to terminal i%8. Every tenth task, i%10 == 9, deletes the person task
	// i-8 added (the same terminal); the rest add person p<i>.
	task := func(i int) string {
		if i%10 == 9 {
			return fmt.Sprintf(`{"taskId":"r-%d","deviceId":%q,"op":"DeletePerson","person":{"id":"p%d"}}`, i, ids[i%len(ids)], i-8)
		}
		return fmt.Sprintf(`{"taskId":"r-%d","deviceId":%q,"op":"AddPerson","person":{"id":"p%d","name":"Person %d"}}`, i, ids[i%len(ids)], i, i)
	}
	var killedAt []int // results received when each kill came
	next := 0
	for {
		n := bo.count()
		if n >= total {
			break
		}
		if len(killedAt) < kills && n >= (len(killedAt)+1)*total/(kills+1) {
			killedAt = append(killedAt, n)
			p.kill()
			<-bo.c.Done()
			<-obs.c.Done()
			p = startAgent(t, cfgPath)
			p.waitLog(runningRe, 0)
			obs.connect(ctx, t, addr, len(killedAt))
			bo.connect(ctx, t, addr, gw, len(killedAt))
			continue
		}
		if next < total && next-n < window {
			var b strings.Builder
			b.WriteByte('[')
			for i := next; i < next+batch; i++ {
				if i > next {
					b.WriteByte(',')
				}
				b.WriteString(task(i))
			}
			b.WriteByte(']')
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := bo.c.Publish(pctx, &paho.Publish{Topic: "faceagent/" + gw + "/tasks", QoS: 1, Payload: []byte(b.String())})
			pcancel()
			if err != nil {
				t.Fatalf("publish tasks %d..%d: %v\n%s", next, next+batch-1, err, p.log())
			}
			next += batch
			continue
		}
		select {
		case <-bo.changed:
		case <-ctx.Done():
			t.Fatalf("%d of %d tasks have a result after %d kills (%d published)\n%s", n, total, len(killedAt), next, p.log())
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.log())
	}
	<-bo.c.Done()
	<-obs.c.Done()
	if len(killedAt) != kills {
		t.Fatalf("%d kills, want %d", len(killedAt), kills)
	}

	// Results: one per task, with the status its op calls for.
	bo.mu.Lock()
	wrong := 0
	for i := range total {
		got := bo.results[fmt.Sprintf("r-%d", i)]
		deletedLater := i%10 == 1
		if got != "succeeded" && !(deletedLater && got == "superseded") {
			if wrong++; wrong <= 10 {
				t.Errorf("task r-%d (%s): result %q", i, task(i), got)
			}
		}
	}
	if wrong > 10 {
		t.Errorf("… %d tasks with a wrong result in all", wrong)
	}
	resultCopies := bo.copies
	bo.mu.Unlock()

	// Whitelists: exactly the persons added and not deleted.
	for d, id := range ids {
		var want []string
		for i := d; i < total; i += len(ids) {
			if i%10 != 1 && i%10 != 9 {
				want = append(want, fmt.Sprintf("p%d", i))
			}
		}
		var got []string
		for _, person := range fleet.Terminal(id).Persons() {
			got = append(got, person.ID)
		}
		slices.Sort(want)
		slices.Sort(got) // Persons sorts by id already; the same order for the compare
		if !slices.Equal(got, want) {
			t.Errorf("terminal %s: %d persons, want %d (first difference: %s)", id, len(got), len(want), firstDifference(got, want))
		}
	}

	// Strict mode, and repeats only of commands in flight at a kill.
	if err := fleet.Violations(); err != nil {
		t.Errorf("strict terminals: %v", err)
	}
	bo.mu.Lock()
	observedDups, bad := obs.check(bo.reportedIn)
	bo.mu.Unlock()
	for _, e := range bad {
		t.Error(e)
	}
	// The terminals count what the observer saw, and they miss nothing: at most one
	// duplicate per kill each (the observer may miss a command around a kill, as it
	// reconnects too, which can hide a repeat from it but never invent one).
	terminalDups := checkOneDuplicatePerKill(t, fleet, kills)
	t.Logf("%d tasks, %d kills at %v results, %d result messages; repeats: %d at the terminals, %d observed (at most %d: one per terminal and kill); %s",
		total, kills, killedAt, resultCopies, terminalDups, observedDups, kills*len(ids), time.Since(start).Round(time.Millisecond))
}

// resultCollector is the back office: it publishes tasks and collects results on a
// persistent session (one hour), which the embedded broker keeps across the agent's kills.
type resultCollector struct {
	c          *paho.Client
	mu         sync.Mutex
	results    map[string]string // taskId → status
	reportedIn map[string]int    // messageId → the life in which its first result arrived
	copies     int               // result messages, repeats included
	changed    chan struct{}     // poked after each result
}

// connect connects the back office for the agent's life (0 before the first kill, 1
// after it, …): life 0 starts the session and subscribes, later ones resume it. Results
// arriving on this connection are counted as arrived in that life.
func (r *resultCollector) connect(ctx context.Context, t *testing.T, addr, gw string, life int) {
	t.Helper()
	first := life == 0
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	onResult := func(pr paho.PublishReceived) (bool, error) { return r.onResult(pr, life) }
	r.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){onResult}})
	expiry := uint32(3600)
	ack, err := r.c.Connect(ctx, &paho.Connect{ClientID: "bo-" + gw, KeepAlive: 30, CleanStart: first,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil {
		t.Fatal(err)
	}
	if !first {
		if !ack.SessionPresent {
			t.Fatal("the embedded broker lost the back office's session across the kill")
		}
		return // the session keeps the subscription
	}
	if _, err := r.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "faceagent/" + gw + "/results", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func (r *resultCollector) onResult(pr paho.PublishReceived, life int) (bool, error) {
	var res struct {
		TaskID    string `json:"taskId"`
		MessageID string `json:"messageId"`
		Status    string `json:"status"`
	}
	_ = json.Unmarshal(pr.Packet.Payload, &res)
	r.mu.Lock()
	r.results[res.TaskID] = res.Status
	if _, ok := r.reportedIn[res.MessageID]; !ok {
		r.reportedIn[res.MessageID] = life
	}
	r.copies++
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return true, nil
}

// count returns how many tasks have a result.
func (r *resultCollector) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.results)
}

// commandObserver subscribes to every terminal's command topic and records each command's
// messageId with the agent's life (0 before the first kill, 1 after it, …) it was seen in.
type commandObserver struct {
	c    *paho.Client
	mu   sync.Mutex
	seen map[string][]observed // deviceId → commands in arrival order
}

type observed struct {
	life      int
	messageID string
}

// connect subscribes for the agent's life (0 before the first kill, …): what arrives on
// this connection is recorded as sent in that life, even if it is handled after the kill.
func (o *commandObserver) connect(ctx context.Context, t *testing.T, addr string, life int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	onCommand := func(pr paho.PublishReceived) (bool, error) { return o.onCommand(pr, life) }
	o.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){onCommand}})
	// A new client id each life: after a SIGKILL the embedded broker hands a clean-start
	// client its previous session's subscription (TestCleanStartAfterCrash), so commands
	// could arrive before this SUBSCRIBE and collide with its packet id (0x91).
	id := fmt.Sprintf("observer-%d", life)
	if _, err := o.c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/face/+", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
}

func (o *commandObserver) onCommand(pr paho.PublishReceived, life int) (bool, error) {
	cmd, err := face.ParseCommandJSON(pr.Packet.Payload)
	if err != nil {
		return true, nil // not a command: the check below is about commands only
	}
	id := strings.TrimPrefix(pr.Packet.Topic, "dev/face/")
	o.mu.Lock()
	o.seen[id] = append(o.seen[id], observed{life, cmd.MessageID})
	o.mu.Unlock()
	return true, nil
}

// check returns how many repeated commands it saw and a description of every repeat that
// breaks the rule: per terminal, a command already sent (in an earlier life, or earlier in
// the same life) may only be sent again as the first command of a life after a kill, and
// only if it is the last command the terminal was sent before that kill — the one in
// flight — and its result had not reached the back office before the kill (reportedIn:
// messageId → the life of its first result). So each kill repeats at most one command per
// terminal. Lives are taken in order; within a life, arrival order. The observer may miss
// a command around a kill (it reconnects too), which can hide a repeat but never invent one.
func (o *commandObserver) check(reportedIn map[string]int) (repeats int, bad []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for dev, cmds := range o.seen {
		// A slow handler of a connection closed by the kill may append after the next
		// connection's first commands: sort by life, keeping arrival order within one.
		cmds = slices.Clone(cmds)
		slices.SortStableFunc(cmds, func(a, b observed) int { return a.life - b.life })
		sent := map[string]bool{} // every messageId sent to dev so far
		last := ""                // the last command sent to dev before the current life
		for from := 0; from < len(cmds); {
			life := cmds[from].life
			to := from
			for to < len(cmds) && cmds[to].life == life {
				to++
			}
			for k, c := range cmds[from:to] {
				if !sent[c.messageID] {
					sent[c.messageID] = true
					continue
				}
				repeats++
				switch {
				case life == 0 || k > 0:
					bad = append(bad, fmt.Sprintf("terminal %s, life %d: %s sent again as command %d of the life: only the first command after a kill may repeat",
						dev, life, c.messageID, k))
				case c.messageID != last:
					bad = append(bad, fmt.Sprintf("terminal %s, life %d: %s sent again, but the command in flight at the kill was %s",
						dev, life, c.messageID, last))
				}
				if at, ok := reportedIn[c.messageID]; ok && at < life {
					bad = append(bad, fmt.Sprintf("terminal %s, life %d: %s sent again, but its result had reached the back office in life %d",
						dev, life, c.messageID, at))
				}
			}
			last = cmds[to-1].messageID
			from = to
		}
	}
	return repeats, bad
}

// memDir returns a temporary directory on tmpfs (/dev/shm) if it has 1 GiB free, else one
// from t.TempDir. It is removed when the test ends.
func memDir(t *testing.T) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || uint64(st.Bavail)*uint64(st.Bsize) < 1<<30 {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "faceagent-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// firstDifference names the first person in one sorted list and not the other.
func firstDifference(got, want []string) string {
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			return "missing " + want[i]
		case i >= len(want):
			return "unexpected " + got[i]
		case got[i] != want[i]:
			if slices.Contains(want, got[i]) {
				return "missing " + want[i]
			}
			return "unexpected " + got[i]
		}
	}
	return "none"
}

// The repeat rule of TestRepeatedSIGKILL accepts, per kill, one resend of the command in
// flight and nothing else.
func TestCommandObserverCheck(t *testing.T) {
	seq := func(spec string) []observed { // "0:a 0:b 1:b": life:messageId
		var out []observed
		for _, f := range strings.Fields(spec) {
			life, id, _ := strings.Cut(f, ":")
			out = append(out, observed{int(life[0] - '0'), id})
		}
		return out
	}
	for _, tc := range []struct {
		name, spec string
		reported   map[string]int
		repeats    int
		bad        string // substring of the one complaint expected; "" for none
	}{
		{"no kill", "0:a 0:b 0:c", nil, 0, ""},
		{"in flight replayed", "0:a 0:b 1:b 1:c", map[string]int{"a": 0}, 1, ""},
		{"in flight replayed at two kills", "0:a 0:b 1:b 1:c 2:c 2:d", map[string]int{"a": 0, "b": 1}, 2, ""},
		{"killed during the replay", "0:a 0:b 1:b 2:b 2:c", map[string]int{"a": 0}, 2, ""},
		{"a life with nothing sent", "0:a 0:b 2:b 2:c", map[string]int{"a": 0}, 1, ""},
		{"nothing replayed", "0:a 0:b 1:c", nil, 0, ""},
		{"two commands replayed", "0:a 0:b 0:c 1:b 1:c 1:d", map[string]int{"a": 0}, 2, "the command in flight at the kill was c"},
		{"an acked command replayed", "0:a 0:b 1:a 1:c", nil, 1, "the command in flight at the kill was b"},
		{"resend within a life", "0:a 0:b 0:b", nil, 1, "only the first command after a kill"},
		{"late repeat after a restart", "0:a 0:b 1:c 1:b", nil, 1, "sent again as command 1"},
		{"reported result resent", "0:a 0:b 1:b", map[string]int{"b": 0}, 1, "its result had reached the back office in life 0"},
		{"result reported after the restart", "0:a 0:b 1:b", map[string]int{"b": 1}, 1, ""},
	} {
		o := &commandObserver{seen: map[string][]observed{"t1": seq(tc.spec)}}
		repeats, bad := o.check(tc.reported)
		if repeats != tc.repeats {
			t.Errorf("%s: %d repeats, want %d", tc.name, repeats, tc.repeats)
		}
		switch {
		case tc.bad == "" && len(bad) > 0:
			t.Errorf("%s: unexpected complaints %q", tc.name, bad)
		case tc.bad != "" && (len(bad) == 0 || !strings.Contains(bad[0], tc.bad)):
			t.Errorf("%s: complaints %q, want one containing %q", tc.name, bad, tc.bad)
		}
	}
}
