package whitelist

import (
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// The cost of a reconciliation of a terminal holding 50,000 persons, 1 % of them with
// another record: the digest both sides compute, the diff of the terminal's pages against
// the desired list, and a whole reconciliation through the Reconciler with a terminal that
// answers at once (its pages prebuilt): what the agent spends besides the link.

const bench50k = 50_000

func bench50kLists(b *testing.B) (*Store, []face.PersonRev) {
	s, err := Open(b.TempDir(), Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	list := siteList(bench50k, 0)
	if _, err := s.Replace("d", list); err != nil {
		b.Fatal(err)
	}
	held := make([]face.PersonRev, len(list))
	for i, r := range list {
		if i%100 == 0 {
			r.Name = "edited at the terminal"
		}
		held[i] = face.PersonRev{ID: r.ID, Rev: r.Rev().String()}
	}
	return s, held
}

// BenchmarkDigest50k: the digest of a 50,000-person list from its ids and wire revs, as a
// terminal computes it from scratch (the agent keeps its own by Toggle on every change).
func BenchmarkDigest50k(b *testing.B) {
	_, held := bench50kLists(b)
	for b.Loop() {
		var d face.Digest
		for _, p := range held {
			rev, err := face.ParseRev(p.Rev)
			if err != nil {
				b.Fatal(err)
			}
			d.Toggle(p.ID, rev)
		}
		if d == 0 {
			b.Fatal("zero digest")
		}
	}
}

// BenchmarkDiff50k: the terminal's 50,000 persons in ListPersons pages of 1,000 (revs
// parsed as a reply's are) against the desired list.
func BenchmarkDiff50k(b *testing.B) {
	s, held := bench50kLists(b)
	var entries []Entry
	for b.Loop() {
		d := s.Diff("d")
		for i := 0; i < len(held); i += face.MaxListLimit {
			page := held[i:min(i+face.MaxListLimit, len(held))]
			next := page[len(page)-1].ID
			if i+len(page) == len(held) {
				next = ""
			}
			var err error
			if entries, err = pageEntries(face.Ack{Persons: page, Next: next}, face.MaxListLimit, entries[:0]); err != nil {
				b.Fatal(err)
			}
			if err := d.Page(entries, next, func(Change) {}); err != nil {
				b.Fatal(err)
			}
		}
		if d.Changed != bench50k/100 {
			b.Fatalf("%d changed", d.Changed)
		}
	}
}

// instantTerminal answers the reconciler's commands at once, from within List and Correct
// (the reentrant path), with pages cut from a prebuilt list.
type instantTerminal struct {
	r       *Reconciler
	held    []face.PersonRev
	applied int
	reports []wire.SyncReport
}

func (t *instantTerminal) List(dev string, cmd face.Command) error {
	i, _ := slices.BinarySearchFunc(t.held, cmd.After, func(p face.PersonRev, id string) int { return strings.Compare(p.ID, id) })
	if i < len(t.held) && t.held[i].ID == cmd.After {
		i++
	}
	j := min(i+cmd.PageSize(), len(t.held))
	a := face.Ack{MessageID: cmd.MessageID, Persons: t.held[i:j]}
	if j < len(t.held) {
		a.Next = t.held[j-1].ID
	}
	t.r.ListReply(dev, cmd.MessageID, a, nil)
	return nil
}

func (t *instantTerminal) Correct(dev string, cmd face.Command) error {
	t.applied++
	t.r.CorrectionDone(dev, cmd.MessageID, face.Ack{MessageID: cmd.MessageID}, nil)
	return nil
}

func (t *instantTerminal) SyncReport(r wire.SyncReport) { t.reports = append(t.reports, r) }

// BenchmarkReconcile50k: a resync of the terminal above through the Reconciler: 50 pages
// of 1,000 and 500 corrective AddPersons (the terminal does not apply them: every
// iteration finds the same 500).
func BenchmarkReconcile50k(b *testing.B) {
	s, held := bench50kLists(b)
	term := &instantTerminal{held: held}
	r, err := NewReconciler(ReconcileOptions{Store: s, Lister: term, Corrector: term, Reporter: term, Clock: newFakeClock(),
		ListLimit: func(string) int { return face.MaxListLimit }})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	term.r = r
	h := face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "SN", Digest: s.Digest("d").String(), Persons: bench50k}
	r.Heartbeat("d", h)
	for b.Loop() {
		term.applied, term.reports = 0, term.reports[:0]
		r.Resync("d")
		if len(term.reports) != 2 || term.reports[1].Status != wire.SyncDone || term.applied != bench50k/100 {
			b.Fatalf("reports %+v, %d applied", term.reports, term.applied)
		}
		r.Heartbeat("d", h) // in sync again: the next Resync starts at once
	}
}
