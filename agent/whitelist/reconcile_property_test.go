package whitelist

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// TestReconcileProperty interleaves, at random, desired changes (Set, Delete with their
// task commands, SetWhitelist), terminal faults (factory reset, replacement, hand edits,
// lost tasks, refusals, malformed pages, lost replies), heartbeats, deliveries and time,
// over v2 and v1 terminals; then the faults stop, and every terminal must come to hold
// exactly its desired list (which refusals may have shortened) and be in sync.
// RECONCILE_PROPERTY_SEED=<seed> replays a run.
func TestReconcileProperty(t *testing.T) {
	seed := testSeed(t, "RECONCILE_PROPERTY_SEED")
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			propertyRound(t, rand.New(rand.NewPCG(seed, uint64(round))))
		})
	}
}

func propertyRound(t *testing.T, rng *rand.Rand) {
	h := newHarness(t, ReconcileOptions{
		MaxReconciling: 1 + rng.IntN(3),
		ListLimit:      func(string) int { return 1 + rng.IntN(9) },
		MaxRefusals:    1 + rng.IntN(4),
		StepTimeout:    30 * time.Second,
		BackoffMax:     30 * time.Second,
	})
	devs := []string{"a", "b", "c", "v1"}
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%02d", i)
	}
	randomRecord := func() Record {
		id := ids[rng.IntN(len(ids))]
		return Record{ID: id, Name: fmt.Sprintf("%s v%d", id, rng.IntN(3))}
	}
	randomList := func() []Record {
		var list []Record
		for _, id := range ids {
			if rng.IntN(2) == 0 {
				list = append(list, Record{ID: id, Name: fmt.Sprintf("%s v%d", id, rng.IntN(3))})
			}
		}
		return list
	}
	for _, dev := range devs {
		protocol := 2
		if dev == "v1" {
			protocol = 1
		}
		h.addTerminal(dev, protocol, randomList())
	}
	faults := true
	steps := 1500
	for step := 0; step < steps; step++ {
		dev := devs[rng.IntN(len(devs))]
		m := h.terms[dev]
		v2 := m.protocol >= 2
		switch k := rng.IntN(100); {
		case k < 25: // deliver one queued command
			if len(h.queue[dev]) > 0 {
				h.deliverOne(dev)
			}
		case k < 35:
			h.clock.Advance(time.Second)
		case k < 50:
			h.rec.Heartbeat(dev, m.heartbeat(dev))
		case k < 62: // a task sets a person
			r := randomRecord()
			if err := h.store.Set(dev, r); err != nil {
				t.Fatal(err)
			}
			h.rec.DesiredChanged(dev)
			if !faults || rng.IntN(8) != 0 { // else the task is lost
				h.task(dev, face.Command{MessageID: fmt.Sprintf("task-%d", step), Op: face.AddPerson, Person: personOf(r, m.protocol)})
			}
		case k < 70: // a task deletes a person
			id := ids[rng.IntN(len(ids))]
			if err := h.store.Delete(dev, id); err != nil {
				t.Fatal(err)
			}
			h.rec.DesiredChanged(dev)
			if !faults || !v2 || rng.IntN(8) != 0 { // a v1 terminal's extras are out of reach
				h.task(dev, face.Command{MessageID: fmt.Sprintf("task-%d", step), Op: face.DeletePerson, Person: face.Person{ID: id}})
			}
		case k < 73: // SetWhitelist
			before := h.desired(dev)
			if _, err := h.store.Replace(dev, randomList()); err != nil {
				t.Fatal(err)
			}
			h.rec.DesiredChanged(dev)
			if !v2 {
				// A v1 terminal lists nothing, so a reconciliation cannot find what the new
				// list drops: the persons the previous desired list named go by task.
				for _, e := range before {
					if _, ok := h.store.Get(dev, e.ID); !ok {
						h.task(dev, face.Command{MessageID: fmt.Sprintf("task-%d-%s", step, e.ID), Op: face.DeletePerson,
							Person: face.Person{ID: e.ID}})
					}
				}
			}
			h.rec.SetWhitelist(dev)
		case k < 76:
			h.rec.Resync(dev)
		default:
			if faults {
				fault(rng, m)
			}
		}
		if step == steps*2/3 {
			faults = false
			for _, m := range h.terms {
				m.refuse, m.badPages, m.dropReplies = nil, 0, 0
			}
		}
	}
	h.pump()
	h.converge(300)
	done, failed := 0, 0
	for _, r := range h.reports {
		switch r.Status {
		case "done":
			done++
		case "failed":
			failed++
		}
	}
	if done == 0 || failed == 0 {
		t.Errorf("a run without both outcomes tests little: %d done, %d failed", done, failed)
	}
	t.Logf("%d reconciliations done, %d failed", done, failed)
	for _, dev := range devs {
		if d := h.terms[dev].duplicates; d != 0 {
			t.Errorf("%s: %d commands reused a messageId", dev, d)
		}
	}
}

// fault does one random harm to m: those a v1 terminal can be repaired from when it is v1.
func fault(rng *rand.Rand, m *modelTerminal) {
	v2 := m.protocol >= 2
	switch k := rng.IntN(9); {
	case k == 0:
		clear(m.persons)
	case k == 1 && v2:
		clear(m.persons)
		m.serial = fmt.Sprintf("SN-%d", rng.Uint32())
	case k == 2 && len(m.persons) > 0:
		delete(m.persons, m.ids()[rng.IntN(len(m.persons))])
	case k == 3 && v2: // a person added at the terminal
		id := fmt.Sprintf("p%02d", rng.IntN(45))
		m.persons[id] = face.Person{ID: id, Name: "by hand"}
	case k == 4 && v2 && len(m.persons) > 0: // a record edited at the terminal
		id := m.ids()[rng.IntN(len(m.persons))]
		p := m.persons[id]
		p.Name, p.Rev = "edited", fmt.Sprintf("%016x", rng.Uint64())
		m.persons[id] = p
	case k == 5 && v2: // refuses the next few of the reconciler's commands
		n := 1 + rng.IntN(4)
		m.refuse = func(face.Command) int {
			if n == 0 {
				return 0
			}
			n--
			return []int{5, 9, codeCapacity}[rng.IntN(3)]
		}
	case k == 6 && v2:
		m.badPages, m.badKind = 1, rng.IntN(3)
	case k == 7:
		m.dropReplies = 1 + rng.IntN(2)
	}
}
