package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// SetWhitelist end to end over MQTT: a protocol 2 terminal whose list differs every way
// from the new one (a person added by hand, persons to delete, to add, to change) and a
// protocol 1 terminal each get a SetWhitelist; each converges to exactly the new list
// (ids and revs), never two commands in flight, with sync reports setWhitelist started
// then done and the result succeeded with the counts against the previous desired list.
// A terminal no task named keeps what it holds. A SetWhitelist over intake.max_whitelist
// and one naming a person twice are dead-lettered with their reasons; a SetWhitelist sent
// again is taken once.
func TestSetWhitelistConverges(t *testing.T) { testSetWhitelistConverges(t, false) }

// The same over serial lines (pseudo-terminal pairs).
func TestSetWhitelistConvergesSerial(t *testing.T) { testSetWhitelistConverges(t, true) }

func testSetWhitelistConverges(t *testing.T, overSerial bool) {
	ids := []string{"v2", "v1", "free"}
	src := syncConfig{gateway: "gw-sw", dataDir: t.TempDir(), backoffMax: "2s", whitelist: []string{"list_limit = 3"}, intake: []string{"max_whitelist = 20"}}.String()
	devices, ports := deviceSections(t, ids, overSerial)
	src += devices
	cfg, err := config.Parse("e2e.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, stop := startAgentFull(t, cfg)
	defer stop()
	opts := sim.Options{Seed: 17, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }}
	// The v1 terminal speaks protocol 1 from its first heartbeat: switched later, the agent
	// would first take it for a v2 terminal and try ListPersons on it once.
	v1opts := opts
	v1opts.Protocol = 1
	start := func(ids []string, ports []sim.SerialPort, o sim.Options) *sim.Fleet {
		var f *sim.Fleet
		var err error
		if overSerial {
			f, err = sim.StartSerial(ports, o)
		} else {
			f, err = sim.StartMQTT("mqtt://"+addr, ids, o)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	var fleet, fleet1 *sim.Fleet
	if overSerial {
		fleet, fleet1 = start(nil, []sim.SerialPort{ports[0], ports[2]}, opts), start(nil, ports[1:2], v1opts)
	} else {
		fleet, fleet1 = start([]string{"v2", "free"}, nil, opts), start([]string{"v1"}, nil, v1opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, f := range []*sim.Fleet{fleet, fleet1} {
		if err := f.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	term := func(id string) *sim.Terminal {
		if id == "v1" {
			return fleet1.Terminal(id)
		}
		return fleet.Terminal(id)
	}
	// The unmanaged terminal holds a person from before the agent.
	if err := term("free").TamperAdd(face.Person{ID: "old", Name: "before the agent"}); err != nil {
		t.Fatal(err)
	}

	bo := connectBackOffice(t, addr, "gw-sw")
	var before []face.Person // p0..p5
	for i := range 6 {
		before = append(before, syncPerson(i))
	}
	var tasks []wire.Task
	for _, dev := range []string{"v2", "v1"} {
		for _, p := range before {
			tasks = append(tasks, wire.Task{TaskID: dev + "-add-" + p.ID, DeviceID: dev, Op: face.AddPerson, Person: p})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-sw/tasks", b)
	bo.waitFor("every add's result", 30*time.Second, func() bool { return len(bo.results) == len(tasks) })
	pollUntil(t, "v2 holds its list", func() bool { return slices.Equal(heldList(term("v2")), desiredList(before)) })

	// v2 drifts: a person added by hand (no rev), a rev edited by hand.
	if err := term("v2").TamperAdd(face.Person{ID: "hand", Name: "added at the terminal"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := term("v2").TamperRev("p1", "fedcba9876543210"); !ok || err != nil {
		t.Fatalf("TamperRev: %v %v", ok, err)
	}
	// The new list: p0 and p1 kept, p2 renamed, p3..p5 gone, p6..p8 new.
	after := []face.Person{before[0], before[1], {ID: "p2", Name: "renamed"}, syncPerson(6), syncPerson(7), syncPerson(8)}
	wantCounts := wire.WhitelistCounts{Added: 4, Deleted: 3, Unchanged: 2}
	var sets []wire.Task
	for _, dev := range []string{"v2", "v1"} {
		sets = append(sets, wire.Task{TaskID: dev + "-set", DeviceID: dev, Op: wire.SetWhitelist, Persons: after})
	}
	b, _ = json.Marshal(sets)
	bo.publish("faceagent/gw-sw/tasks", b)
	bo.publish("faceagent/gw-sw/tasks", b) // sent again: taken once
	// Over the bound, and a person twice.
	var big []face.Person
	for i := range 21 {
		big = append(big, syncPerson(100+i))
	}
	over, _ := json.Marshal(wire.Task{TaskID: "too-big", DeviceID: "v2", Op: wire.SetWhitelist, Persons: big})
	bo.publish("faceagent/gw-sw/tasks", over)
	dup, _ := json.Marshal(wire.Task{TaskID: "dup", DeviceID: "v2", Op: wire.SetWhitelist, Persons: []face.Person{syncPerson(1), syncPerson(1)}})
	bo.publish("faceagent/gw-sw/tasks", dup)

	bo.waitFor("both SetWhitelist results and two deadletters", 40*time.Second, func() bool {
		_, a := bo.results["v2-set"]
		_, b := bo.results["v1-set"]
		return a && b && len(bo.dead) >= 2
	})
	bo.mu.Lock()
	for _, dev := range []string{"v2", "v1"} {
		r := bo.results[dev+"-set"]
		if r.Status != wire.Succeeded || r.WhitelistCounts == nil || *r.WhitelistCounts != wantCounts || r.DeviceID != dev {
			t.Errorf("%s: result %+v (counts %+v), want succeeded with %+v", dev, r, r.WhitelistCounts, wantCounts)
		}
		s := bo.syncs[dev]
		var got []string
		for _, rep := range s {
			if rep.Reason == wire.SyncSetWhitelist {
				got = append(got, string(rep.Status))
			}
		}
		if !slices.Equal(got, []string{"started", "done"}) {
			t.Errorf("%s: setWhitelist sync reports %v (all: %+v)", dev, got, s)
		}
	}
	var reasons []string
	for _, d := range bo.dead {
		reasons = append(reasons, d.Reason)
	}
	bo.mu.Unlock()
	if !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "intake.max_whitelist 20") }) ||
		!slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "twice") || strings.Contains(r, "duplicate") }) {
		t.Errorf("deadletter reasons %q", reasons)
	}
	if got, want := heldList(term("v2")), desiredList(after); !slices.Equal(got, want) {
		t.Errorf("v2 holds %v, want %v", got, want)
	}
	var v1held []string
	for _, p := range term("v1").Persons() {
		v1held = append(v1held, p.ID+" "+p.Name)
	}
	slices.Sort(v1held)
	var v1want []string
	for _, p := range after {
		v1want = append(v1want, p.ID+" "+p.Name)
	}
	slices.Sort(v1want)
	if !slices.Equal(v1held, v1want) {
		t.Errorf("v1 holds %v, want %v", v1held, v1want)
	}
	if got := term("free").Persons(); len(got) != 1 || got[0].ID != "old" {
		t.Errorf("the unmanaged terminal holds %+v", got)
	}
	// Taken once: no second result arrives for the message sent twice.
	bo.mu.Lock()
	n := len(bo.results)
	bo.mu.Unlock()
	if n != len(tasks)+2 {
		t.Errorf("%d results, want %d", n, len(tasks)+2)
	}
	for _, f := range []*sim.Fleet{fleet, fleet1} {
		if err := f.Violations(); err != nil {
			t.Error(err)
		}
	}
}
