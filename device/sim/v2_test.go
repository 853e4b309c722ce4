package sim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
)

// v2Link is one simulated terminal "d" with a link to it, over MQTT (the embedded broker)
// or serial (a PTY pair).
type v2Link struct {
	f    *Fleet
	l    device.Link
	term *Terminal
	seq  int
}

func onMQTT(t *testing.T, o Options) *v2Link {
	t.Helper()
	srv, url := startBroker(t)
	l, err := mqttlink.New(mqttlink.Config{Bus: srv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f, err := StartMQTT(url, []string{"d"}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, f.WaitReady(ctx))
	return &v2Link{f: f, l: l, term: f.Terminal("d")}
}

func onSerial(t *testing.T, o Options) *v2Link {
	t.Helper()
	f, links := serialFleet(t, []string{"d"}, o)
	waitKind(t, links["d"], device.Up)
	return &v2Link{f: f, l: links["d"], term: f.Terminal("d")}
}

// bothTransports runs test against a terminal over MQTT and over serial.
func bothTransports(t *testing.T, o Options, test func(t *testing.T, v *v2Link)) {
	t.Run("mqtt", func(t *testing.T) { test(t, onMQTT(t, strict(t, o))) })
	t.Run("serial", func(t *testing.T) { test(t, onSerial(t, strict(t, o))) })
}

// do sends cmd (a fresh messageId unless it has one) and returns its ack.
func (v *v2Link) do(t *testing.T, cmd face.Command) face.Ack {
	t.Helper()
	if cmd.MessageID == "" {
		v.seq++
		cmd.MessageID = fmt.Sprintf("%s-%d", cmd.Op, v.seq)
	}
	must(t, v.l.Send(context.Background(), "d", cmd))
	for {
		ev := waitKind(t, v.l, device.Ack)
		if ev.Ack.MessageID == cmd.MessageID {
			return ev.Ack
		}
	}
}

func (v *v2Link) add(t *testing.T, id, name string) face.Person {
	t.Helper()
	p := face.Person{ID: id, Name: name}
	p.Rev = face.RecordRev(p.ID, p.Name, "", "", "").String()
	if a := v.do(t, face.Command{Op: face.AddPerson, Person: p}); a.Code != 0 {
		t.Fatalf("AddPerson %s: %+v", id, a)
	}
	return p
}

// heartbeat asks for a heartbeat and returns it.
func (v *v2Link) heartbeat(t *testing.T) face.Heartbeat {
	t.Helper()
	v.term.SendHeartbeat()
	return waitKind(t, v.l, device.Heartbeat).Heartbeat
}

// list pages through the terminal with limit and returns every page.
func (v *v2Link) list(t *testing.T, limit int) [][]face.PersonRev {
	t.Helper()
	var pages [][]face.PersonRev
	after := ""
	for range 1000 {
		a := v.do(t, face.Command{Op: face.ListPersons, After: after, Limit: limit})
		if a.Code != 0 {
			t.Fatalf("ListPersons refused: %+v", a)
		}
		pages = append(pages, a.Persons)
		if a.Next == "" {
			return pages
		}
		after = a.Next
	}
	t.Fatal("ListPersons never ended")
	return nil
}

// digestOf is the digest of what a list holds, computed as the agent computes it.
func digestOf(t *testing.T, pages [][]face.PersonRev) face.Digest {
	var d face.Digest
	for _, pg := range pages {
		for _, p := range pg {
			r, err := face.ParseRev(p.Rev)
			if err != nil {
				t.Fatal(err)
			}
			d.Toggle(p.ID, r)
		}
	}
	return d
}

func pageIDs(pages [][]face.PersonRev) string {
	var out []string
	for _, pg := range pages {
		var ids []string
		for _, p := range pg {
			ids = append(ids, p.ID)
		}
		out = append(out, strings.Join(ids, ","))
	}
	return strings.Join(out, " | ")
}

// A v2 terminal reports its serial, digest, persons and capacity, keeps each person's rev
// as sent, and pages through its persons in bytewise id order.
func TestV2HeartbeatAndListPersons(t *testing.T) {
	bothTransports(t, Options{Seed: 1, Capacity: 500}, func(t *testing.T, v *v2Link) {
		h := v.heartbeat(t)
		if h.Protocol != 2 || h.Serial != "FS-d-1" || h.Digest != "0000000000000000" || h.Persons != 0 || h.Capacity != 500 || h.Batch != 0 {
			t.Fatalf("empty terminal's heartbeat %+v", h)
		}
		var want face.Digest
		revs := map[string]string{}
		for _, id := range []string{"9", "10", "a", "100", "2"} {
			p := v.add(t, id, "n"+id)
			r, _ := face.ParseRev(p.Rev)
			want.Toggle(id, r)
			revs[id] = p.Rev
		}
		// Replacing a record changes its rev: the digest swaps the old member for the new.
		p := v.add(t, "a", "renamed")
		old, _ := face.ParseRev(revs["a"])
		want.Toggle("a", old)
		r, _ := face.ParseRev(p.Rev)
		want.Toggle("a", r)
		revs["a"] = p.Rev

		h = v.heartbeat(t)
		if h.Digest != want.String() || h.Persons != 5 || v.term.Digest() != want {
			t.Fatalf("heartbeat %+v, want digest %s", h, want)
		}
		pages := v.list(t, 2)
		if got := pageIDs(pages); got != "10,100 | 2,9 | a" {
			t.Fatalf("pages %s", got)
		}
		for _, pg := range pages {
			for _, e := range pg {
				if e.Rev != revs[e.ID] {
					t.Fatalf("%s listed with rev %s, sent %s", e.ID, e.Rev, revs[e.ID])
				}
			}
		}
		if digestOf(t, pages) != want {
			t.Fatal("the listed persons do not make the heartbeat's digest")
		}
		// A page that ends the list exactly says so: next is "".
		if got := pageIDs(v.list(t, 5)); got != "10,100,2,9,a" {
			t.Fatalf("one page of 5: %s", got)
		}
		// after need not be a held id; past the last id the page is empty.
		a := v.do(t, face.Command{Op: face.ListPersons, After: "1", Limit: 1})
		if len(a.Persons) != 1 || a.Persons[0].ID != "10" || a.Next != "10" {
			t.Fatalf("after 1: %+v", a)
		}
		a = v.do(t, face.Command{Op: face.ListPersons, After: "b"})
		if len(a.Persons) != 0 || a.Next != "" || a.Code != 0 {
			t.Fatalf("after the last id: %+v", a)
		}
		// A repeated ListPersons is acked again, with the page as the list is now.
		cmd := face.Command{MessageID: "list-again", Op: face.ListPersons, Limit: 1}
		first := v.do(t, cmd)
		v.term.TamperDelete("10")
		again := v.do(t, cmd)
		if first.Persons[0].ID != "10" || again.Persons[0].ID != "100" || again.Code != 0 {
			t.Fatalf("repeat: %+v then %+v", first, again)
		}
		if s := v.term.Stats(); s.Lists < 6 || s.Duplicates != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// limit 0 means 100: a page of 100, then the rest.
func TestV2ListPersonsDefaultLimit(t *testing.T) {
	v := onMQTT(t, Options{Seed: 1})
	for i := range face.DefaultListLimit + 3 {
		must(t, v.term.TamperAdd(face.Person{ID: fmt.Sprintf("%04d", i), Rev: "ed8b5c1121eda4fa"}))
	}
	pages := v.list(t, 0)
	if len(pages) != 2 || len(pages[0]) != face.DefaultListLimit || len(pages[1]) != 3 {
		t.Fatalf("pages of %d and %d", len(pages[0]), len(pages[len(pages)-1]))
	}
	if digestOf(t, pages) != v.term.Digest() {
		t.Fatal("listed digest differs")
	}
}

// A repeated AddPerson is acked again and not applied again, on a v2 terminal as on v1.
func TestV2RepeatedMessageIDAppliedOnce(t *testing.T) {
	bothTransports(t, Options{Seed: 1}, func(t *testing.T, v *v2Link) {
		add := face.Command{MessageID: "add-1", Op: face.AddPerson, Person: face.Person{ID: "1", Rev: "ed8b5c1121eda4fa"}}
		v.do(t, add)
		v.term.TamperDelete("1")
		if a := v.do(t, add); a.Code != 0 {
			t.Fatalf("repeat acked %+v", a)
		}
		if ps := v.term.Persons(); len(ps) != 0 || v.term.Digest() != 0 {
			t.Fatalf("the repeat was applied again: %v", ps)
		}
	})
}

// A v1 terminal sends no v2 field, refuses ListPersons as an unknown op and keeps no rev;
// switched to v2 while running, it lists what it holds with the zero rev.
func TestV1ModeAndSwitchingProtocol(t *testing.T) {
	bothTransports(t, Options{Seed: 1, Protocol: 1, Capacity: 7}, func(t *testing.T, v *v2Link) {
		v.add(t, "1", "Ann")
		h := v.heartbeat(t)
		if h != (face.Heartbeat{DeviceID: "d", Time: h.Time, Firmware: "facesim-1", Persons: 1}) {
			t.Fatalf("v1 heartbeat %+v", h)
		}
		a := v.do(t, face.Command{Op: face.ListPersons})
		if a.Code != UnknownOpCode || a.Message != `unknown op "ListPersons"` || a.Persons != nil {
			t.Fatalf("v1 ListPersons: %+v", a)
		}
		if ps := v.term.Persons(); len(ps) != 1 || ps[0].Rev != "" {
			t.Fatalf("v1 kept %+v", ps)
		}
		must(t, v.term.SetProtocol(2))
		h = v.heartbeat(t)
		var want face.Digest
		want.Toggle("1", face.Rev{})
		if h.Protocol != 2 || h.Digest != want.String() || h.Capacity != 7 {
			t.Fatalf("v2 heartbeat %+v, want digest %s", h, want)
		}
		if pages := v.list(t, 10); len(pages) != 1 || !reflect.DeepEqual(pages[0], []face.PersonRev{{ID: "1", Rev: "0000000000000000"}}) {
			t.Fatalf("pages %+v", pages)
		}
		if err := v.term.SetProtocol(3); err == nil {
			t.Fatal("protocol 3 accepted")
		}
	})
}

// Factory reset empties the terminal and keeps its serial; replacement empties it and
// changes the serial.
func TestFactoryResetAndReplacement(t *testing.T) {
	bothTransports(t, Options{Seed: 1}, func(t *testing.T, v *v2Link) {
		v.add(t, "1", "Ann")
		v.add(t, "2", "Bo")
		v.term.FactoryReset()
		h := v.heartbeat(t)
		if h.Persons != 0 || h.Digest != "0000000000000000" || h.Serial != "FS-d-1" {
			t.Fatalf("after a factory reset: %+v", h)
		}
		if pages := v.list(t, 10); len(pages) != 1 || len(pages[0]) != 0 {
			t.Fatalf("after a factory reset: %v", pages)
		}
		v.add(t, "3", "Cy")
		if s := v.term.Replace(""); s != "FS-d-2" {
			t.Fatalf("new serial %q", s)
		}
		h = v.heartbeat(t)
		if h.Persons != 0 || h.Digest != "0000000000000000" || h.Serial != "FS-d-2" {
			t.Fatalf("after a replacement: %+v", h)
		}
		v.term.Replace("SN-42")
		if h = v.heartbeat(t); h.Serial != "SN-42" {
			t.Fatalf("chosen serial: %+v", h)
		}
	})
}

// Hand edits at the terminal change what it lists and its digest exactly as the agent
// would compute them from the list.
func TestTampering(t *testing.T) {
	bothTransports(t, Options{Seed: 1}, func(t *testing.T, v *v2Link) {
		v.add(t, "1", "Ann")
		v.add(t, "2", "Bo")
		v.add(t, "3", "Cy")
		before := v.heartbeat(t).Digest
		must(t, v.term.TamperAdd(face.Person{ID: "4", Name: "intruder"}))
		if !v.term.TamperDelete("2") || v.term.TamperDelete("nobody") {
			t.Fatal("TamperDelete")
		}
		if ok, err := v.term.TamperRev("3", "0123456789abcdef"); !ok || err != nil {
			t.Fatalf("TamperRev: %v %v", ok, err)
		}
		if _, err := v.term.TamperRev("3", "not a rev"); err == nil {
			t.Fatal("a bad rev accepted")
		}
		if err := v.term.TamperAdd(face.Person{ID: "5", Rev: "XYZ"}); err == nil {
			t.Fatal("a bad rev accepted")
		}
		h := v.heartbeat(t)
		pages := v.list(t, 2)
		if h.Digest == before || h.Digest != digestOf(t, pages).String() || h.Persons != 3 {
			t.Fatalf("heartbeat %+v, listed %v", h, pages)
		}
		want := [][]face.PersonRev{
			{{ID: "1", Rev: face.RecordRev("1", "Ann", "", "", "").String()}, {ID: "3", Rev: "0123456789abcdef"}},
			{{ID: "4", Rev: "0000000000000000"}},
		}
		if !reflect.DeepEqual(pages, want) {
			t.Fatalf("pages %+v\nwant %+v", pages, want)
		}
	})
}

// A full terminal refuses a new person with code 23 and still replaces one it holds.
func TestCapacity(t *testing.T) {
	bothTransports(t, Options{Seed: 1, Capacity: 2}, func(t *testing.T, v *v2Link) {
		v.add(t, "1", "Ann")
		v.add(t, "2", "Bo")
		a := v.do(t, face.Command{Op: face.AddPerson, Person: face.Person{ID: "3"}})
		if a.Code != CapacityCode || a.Message != "capacity exceeded" {
			t.Fatalf("over capacity: %+v", a)
		}
		v.add(t, "2", "Bob")
		must(t, v.term.SetCapacity(3))
		v.add(t, "3", "Cy")
		if h := v.heartbeat(t); h.Persons != 3 || h.Capacity != 3 {
			t.Fatalf("heartbeat %+v", h)
		}
		if v.term.SetCapacity(-1) == nil {
			t.Fatal("negative capacity accepted")
		}
	})
	if _, err := StartSerial(nil, Options{Capacity: -1}); err == nil {
		t.Fatal("a fleet with a negative capacity started")
	}
	if _, err := StartSerial(nil, Options{Protocol: 3}); err == nil {
		t.Fatal("a fleet speaking protocol 3 started")
	}
}

// An op the terminal does not know (here one of a later protocol, published raw since the
// link sends only valid commands) is refused by its messageId, not dropped.
func TestUnknownOpRefusedOverMQTT(t *testing.T) {
	srv, url := startBroker(t)
	l, err := mqttlink.New(mqttlink.Config{Bus: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := StartMQTT(url, []string{"d"}, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, f.WaitReady(ctx))
	must(t, srv.PublishDeferred("dev/face/d", []byte(`{"messageId":"pf-1","op":"SetDoorMode","door":{"mode":"open"}}`), 1))
	ev := waitKind(t, l, device.Ack)
	if ev.Ack.MessageID != "pf-1" || ev.Ack.Code != UnknownOpCode || ev.Ack.Message != `unknown op "SetDoorMode"` {
		t.Fatalf("ack %+v", ev.Ack)
	}
}

// RefuseNext refuses the next new command of that op for that person once (not applied;
// the same messageId again gets the same refusal), and no other command.
func TestRefuseNext(t *testing.T) {
	v := onMQTT(t, strict(t, Options{}))
	v.add(t, "a", "A")
	v.add(t, "b", "B")
	v.term.RefuseNext(face.DeletePerson, "a")
	if a := v.do(t, face.Command{Op: face.DeletePerson, Person: face.Person{ID: "b"}}); a.Code != 0 {
		t.Fatalf("delete b: %+v", a)
	}
	del := face.Command{MessageID: "del-a", Op: face.DeletePerson, Person: face.Person{ID: "a"}}
	if a := v.do(t, del); a.Code != 17 {
		t.Fatalf("delete a: %+v, want refused", a)
	}
	if a := v.do(t, del); a.Code != 17 {
		t.Fatalf("delete a again (same messageId): %+v, want refused again", a)
	}
	if got := v.term.Persons(); len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("holds %v, want a only", got)
	}
	if a := v.do(t, face.Command{Op: face.DeletePerson, Person: face.Person{ID: "a"}}); a.Code != 0 {
		t.Fatalf("a later delete of a: %+v", a)
	}
	if got := v.term.Persons(); len(got) != 0 {
		t.Fatalf("holds %v, want none", got)
	}
}

// A terminal taken offline hears nothing while it is: a command sent then is not applied
// and not acked. It comes back by itself with a heartbeat and then takes the command.
func TestGoOffline(t *testing.T) {
	bothTransports(t, Options{Seed: 1}, func(t *testing.T, v *v2Link) {
		const offline = 300 * time.Millisecond
		began := time.Now()
		v.term.GoOffline(offline)
		p := face.Person{ID: "1", Name: "Ann"}
		cmd := face.Command{MessageID: "AddPerson-offline", Op: face.AddPerson, Person: p}
		if err := v.l.Send(context.Background(), "d", cmd); err != nil && !errors.Is(err, device.ErrNotConnected) {
			t.Fatal(err)
		}
		// Back: the first heartbeat after the offline period (one the MQTT terminal sent
		// when it subscribed may still be waiting to be read).
		for waitKind(t, v.l, device.Heartbeat); time.Since(began) < offline; {
			waitKind(t, v.l, device.Heartbeat)
		}
		if held, st := v.term.Persons(), v.term.Stats(); len(held) != 0 || st.Offline != 1 {
			t.Fatalf("after an offline period: holds %v, stats %+v", held, st)
		}
		if a := v.do(t, cmd); a.Code != 0 {
			t.Fatalf("the command again, online: %+v", a)
		}
		if held := v.term.Persons(); len(held) != 1 || held[0].ID != "1" {
			t.Fatalf("holds %v, want person 1", held)
		}
	})
}
