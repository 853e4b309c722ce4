package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// syncPerson is the i-th person of the whitelist sync tests.
func syncPerson(i int) face.Person {
	return face.Person{ID: fmt.Sprintf("p%d", i), Name: fmt.Sprintf("person %d", i)}
}

// heldList is what terminal t holds, as "id rev" lines in id order.
func heldList(t *sim.Terminal) []string {
	var got []string
	for _, p := range t.Persons() {
		got = append(got, p.ID+" "+p.Rev)
	}
	slices.Sort(got)
	return got
}

// desiredList is the desired list persons make, as heldList says it: each with the
// agent's rev of its record.
func desiredList(persons []face.Person) []string {
	var want []string
	for _, p := range persons {
		want = append(want, p.ID+" "+face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String())
	}
	slices.Sort(want)
	return want
}

// Whitelist sync end to end over MQTT: six protocol 2 terminals (strict: never two
// commands in flight) get their whitelists by tasks and are in sync; then each drifts in
// its own way — factory reset, replaced by a new terminal, a person with a rev added by
// hand, a person deleted by hand, a person's rev changed by hand, a DeletePerson task the
// terminal refused — and each is repaired to exactly its desired list (ids and revs), with
// a sync report started, then done, naming the reason and counting what was repaired, and
// /metrics saying every terminal is in sync again.
func TestWhitelistSyncRepairsDrift(t *testing.T) { testWhitelistSyncRepairsDrift(t, false) }

// The same over serial lines (pseudo-terminal pairs): ListPersons pages sized to a frame.
func TestWhitelistSyncRepairsDriftSerial(t *testing.T) { testWhitelistSyncRepairsDrift(t, true) }

func testWhitelistSyncRepairsDrift(t *testing.T, overSerial bool) {
	ids := []string{"reset", "replace", "extra", "missing", "rev", "delfail"}
	src := syncConfig{gateway: "gw-s", dataDir: t.TempDir(), backoffMax: "2s", whitelist: []string{"list_limit = 2"}}.String()
	devices, ports := deviceSections(t, ids, overSerial)
	src += devices
	cfg, err := config.Parse("e2e.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	opts := sim.Options{
		Seed: 11, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) },
	}
	var fleet *sim.Fleet
	if overSerial {
		fleet, err = sim.StartSerial(ports, opts)
	} else {
		fleet, err = sim.StartMQTT("mqtt://"+addr, ids, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	bo := connectBackOffice(t, addr, "gw-s")
	const n = 5
	var persons []face.Person
	for i := range n {
		persons = append(persons, syncPerson(i))
	}
	var tasks []wire.Task
	for _, dev := range ids {
		for _, p := range persons {
			tasks = append(tasks, wire.Task{TaskID: dev + "-add-" + p.ID, DeviceID: dev, Op: face.AddPerson, Person: p})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-s/tasks", b)
	bo.waitFor("every add's result", 30*time.Second, func() bool { return len(bo.results) == len(tasks) })
	for id, r := range bo.results {
		if r.Status != wire.Succeeded {
			t.Fatalf("task %s: %+v", id, r)
		}
	}
	pollUntil(t, "every terminal in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == float64(len(ids)) })
	bo.mu.Lock()
	if len(bo.syncs) != 0 {
		t.Errorf("terminals in sync were reconciled: %+v", bo.syncs)
	}
	bo.mu.Unlock()

	// The drifts.
	term := fleet.Terminal
	term("reset").FactoryReset()
	oldSerial := term("replace").Serial()
	if s := term("replace").Replace(""); s == oldSerial {
		t.Fatalf("replacement kept serial %s", s)
	}
	if err := term("extra").TamperAdd(face.Person{ID: "p9", Name: "by hand", Rev: "0123456789abcdef"}); err != nil {
		t.Fatal(err)
	}
	if !term("missing").TamperDelete("p2") {
		t.Fatal("p2 not on missing")
	}
	if ok, err := term("rev").TamperRev("p3", "fedcba9876543210"); !ok || err != nil {
		t.Fatalf("TamperRev: %v %v", ok, err)
	}
	term("delfail").RefuseNext(face.DeletePerson, "p1")
	del, _ := json.Marshal(wire.Task{TaskID: "delfail-del-p1", DeviceID: "delfail", Op: face.DeletePerson, Person: face.Person{ID: "p1"}})
	bo.publish("faceagent/gw-s/tasks", del)
	for _, id := range ids {
		term(id).SendHeartbeat()
	}

	want := map[string]struct {
		reason                  wire.SyncReason
		missing, extra, changed int
	}{
		"reset":   {wire.SyncDigest, n, 0, 0},
		"replace": {wire.SyncSerial, n, 0, 0},
		"extra":   {wire.SyncDigest, 0, 1, 0},
		"missing": {wire.SyncDigest, 1, 0, 0},
		"rev":     {wire.SyncDigest, 0, 0, 1},
		"delfail": {wire.SyncDigest, 0, 1, 0},
	}
	bo.waitFor("a done sync report of every terminal", 30*time.Second, func() bool {
		for _, id := range ids {
			s := bo.syncs[id]
			if len(s) == 0 || s[len(s)-1].Status != wire.SyncDone {
				return false
			}
		}
		return true
	})
	bo.mu.Lock()
	if r := bo.results["delfail-del-p1"]; r.Status != wire.Failed {
		t.Errorf("the refused delete's result: %+v", r)
	}
	for _, id := range ids {
		s, w := bo.syncs[id], want[id]
		if len(s) != 2 || s[0].Status != wire.SyncStarted || s[0].Reason != w.reason || s[1].Reason != w.reason ||
			s[1].Missing != w.missing || s[1].Extra != w.extra || s[1].Changed != w.changed {
			t.Errorf("%s: sync reports %+v, want started and done, reason %s, missing %d extra %d changed %d",
				id, s, w.reason, w.missing, w.extra, w.changed)
		}
	}
	bo.mu.Unlock()

	for _, id := range ids {
		desired := persons
		if id == "delfail" {
			desired = slices.DeleteFunc(slices.Clone(persons), func(p face.Person) bool { return p.ID == "p1" })
		}
		if got, exp := heldList(term(id)), desiredList(desired); !slices.Equal(got, exp) {
			t.Errorf("terminal %s holds %v, want %v", id, got, exp)
		}
	}
	pollUntil(t, "every terminal in sync again", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == float64(len(ids)) })
	exp := scrape(t, a)
	for _, s := range []string{
		`faceagent_sync_drift_total{reason="digest"} 6`, // the replacement's digest differs too; its report names the serial
		`faceagent_sync_drift_total{reason="serial"} 1`,
		`faceagent_sync_reconciliations_total{outcome="done"} 6`,
		`faceagent_sync_reports_published_total 12`,
		`faceagent_sync_reports_backlog 0`,
		`faceagent_journal_file_bytes{journal="syncreports"} `,
	} {
		if !strings.Contains(exp, s) {
			t.Errorf("/metrics lacks %q:\n%s", s, grepLines(exp, "faceagent_sync"))
		}
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
	stop()
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The resync control command reconciles terminals whatever their heartbeats say: a
// protocol 2 terminal in sync is listed and reported done with nothing to repair; a
// protocol 1 terminal (it cannot list) is sent every desired person again and reported
// done with reason count. Both keep exactly their lists, never two commands in flight.
func TestWhitelistResyncCommand(t *testing.T) {
	ids := []string{"v2", "v1"}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-y\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[dispatch]\nretry_interval = \"300ms\"\nheartbeat_timeout = \"3s\"\n[journal]\nsync = \"none\"\n"+
		"[[devices]]\nid = \"v2\"\n[[devices]]\nid = \"v1\"\n", t.TempDir())
	addr, a, stop := startAgentFull(t, parse(t, src))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 3, HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fleet.Terminal("v1").SetProtocol(1); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOffice(t, addr, "gw-y")
	const n = 4
	var tasks []wire.Task
	for _, dev := range ids {
		for i := range n {
			tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("%s-%d", dev, i), DeviceID: dev, Op: face.AddPerson, Person: syncPerson(i)})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-y/tasks", b)
	bo.waitFor("every result", 20*time.Second, func() bool { return len(bo.results) == len(tasks) })
	pollUntil(t, "v2 in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })

	sc, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	w, err := sc.KeyNotify(ctx, "faceagent/gw-y/control/status")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Set(ctx, "faceagent/gw-y/control", []byte(`{"id":"r1","command":"resync"}`), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case nt := <-w.C():
		var st remote.Status
		if err := json.Unmarshal(nt.Value, &st); err != nil || !st.OK || st.Result != "2 terminals to reconcile" {
			t.Fatalf("resync status %s (%v)", nt.Value, err)
		}
	case <-ctx.Done():
		t.Fatal("no control status")
	}
	_ = w.Stop(ctx)

	bo.waitFor("a done sync report of both terminals", 20*time.Second, func() bool {
		for _, id := range ids {
			s := bo.syncs[id]
			if len(s) == 0 || s[len(s)-1].Status != wire.SyncDone {
				return false
			}
		}
		return true
	})
	bo.mu.Lock()
	for id, reason := range map[string]wire.SyncReason{"v2": wire.SyncDigest, "v1": wire.SyncCount} {
		s := bo.syncs[id]
		nothingToRepair := id == "v1" || s[len(s)-1].Missing+s[len(s)-1].Extra+s[len(s)-1].Changed == 0
		if len(s) != 2 || s[0].Status != wire.SyncStarted || s[1].Reason != reason || !nothingToRepair {
			t.Errorf("%s: sync reports %+v, want started and done with reason %s", id, s, reason)
		}
	}
	bo.mu.Unlock()
	// The device state key says so too (written at most once per write_interval).
	key := "faceagent/gw-y/devices/v2"
	sw, err := sc.KeyNotify(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	synced := func(v []byte) bool {
		var st wire.DeviceState
		if _, err := st.UnmarshalMsg(v); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return st.SyncStatus == string(wire.SyncDone) && st.LastSync > 0 && st.InSync && st.DesiredPersons == n
	}
	e, err := sc.Get(ctx, key)
	for err != nil || !synced(e.Value) {
		select {
		case nt := <-sw.C():
			e, err = store.Entry{Value: nt.Value}, nil
		case <-ctx.Done():
			t.Fatalf("%s never said the reconciliation was done (last: %v %x)", key, err, e.Value)
		}
	}
	_ = sw.Stop(ctx)
	if got := len(fleet.Terminal("v1").Persons()); got != n {
		t.Errorf("v1 holds %d persons, want %d", got, n)
	}
	var persons []face.Person
	for i := range n {
		persons = append(persons, syncPerson(i))
	}
	if got, exp := heldList(fleet.Terminal("v2")), desiredList(persons); !slices.Equal(got, exp) {
		t.Errorf("v2 holds %v, want %v", got, exp)
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
	stop()
}

// freeLoopbackAddr returns a loopback address with a port free a moment ago: an agent
// restarted on it keeps its terminals' broker address.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A long reconciliation (a factory-reset terminal of 300 persons, pages of 7) yields to
// tasks that arrive while it runs — they are sent before its next correction, never two
// commands in flight — and survives a restart of the agent in its middle: the corrections
// journalled before the stop are sent after it, the reconciliation starts over from the
// terminal's heartbeat, and the terminal ends holding exactly the desired list, tasks
// included.
func TestWhitelistSyncYieldsToTasksAndSurvivesRestart(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	src := syncConfig{gateway: "gw-l", dataDir: dir, listen: addr, whitelist: []string{"list_limit = 7"}, devices: []string{"big"}}.String()
	_, a, stop := startAgentFull(t, parse(t, src))
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"big"}, sim.Options{Seed: 5, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	big := fleet.Terminal("big")
	bo := connectBackOffice(t, addr, "gw-l")
	const n = 300
	var persons []face.Person
	var tasks []wire.Task
	for i := range n {
		persons = append(persons, syncPerson(i))
		tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("add-%d", i), DeviceID: "big", Op: face.AddPerson, Person: persons[i]})
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-l/tasks", b)
	bo.waitFor("every add's result", 30*time.Second, func() bool { return len(bo.results) == n })
	pollUntil(t, "big in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })

	big.FactoryReset()
	big.SendHeartbeat()
	bo.waitFor("the reconciliation started", 10*time.Second, func() bool { return len(bo.syncs["big"]) > 0 })
	// Tasks while it runs: a new person, and a changed one.
	late := []wire.Task{
		{TaskID: "late-new", DeviceID: "big", Op: face.AddPerson, Person: syncPerson(n)},
		{TaskID: "late-changed", DeviceID: "big", Op: face.AddPerson, Person: face.Person{ID: "p7", Name: "renamed"}},
	}
	persons = append(persons, syncPerson(n))
	persons[7] = late[1].Person
	b, _ = json.Marshal(late)
	bo.publish("faceagent/gw-l/tasks", b)
	bo.waitFor("the late tasks' results", 10*time.Second, func() bool {
		return bo.results["late-new"].Status == wire.Succeeded && bo.results["late-changed"].Status == wire.Succeeded
	})
	pollUntil(t, "a third of the list repaired", func() bool { return len(big.Persons()) >= n/3 })
	if held := len(big.Persons()); held >= n {
		t.Fatalf("the terminal holds %d persons before the restart: nothing left to repair after it", held)
	}
	stop()

	_, a, _ = startAgentFull(t, parse(t, src))
	pollUntil(t, "big in sync after the restart", func() bool {
		return metric(t, a, "faceagent_terminals_in_sync") == 1 && metric(t, a, `faceagent_sync_reconciliations_total{outcome="done"}`) >= 1
	})
	if got, exp := heldList(big), desiredList(persons); !slices.Equal(got, exp) {
		t.Errorf("the terminal holds %d persons, want %d: %v", len(got), len(exp), diffLines(got, exp))
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}

// diffLines lists what got lacks (-) and holds beyond want (+), at most 10 of each.
func diffLines(got, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) && len(out) < 10 {
			out = append(out, "-"+w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) && len(out) < 20 {
			out = append(out, "+"+g)
		}
	}
	return out
}
