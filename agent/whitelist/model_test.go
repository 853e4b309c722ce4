package whitelist

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// model is the desired state as the tests understand it: plain maps, no sharing.
type model map[string]*modelTerm

type modelTerm struct {
	whole   bool
	persons map[string]modelPerson
}

type modelPerson struct {
	rec  Record
	excl bool
}

func (m model) term(dev string) *modelTerm {
	t := m[dev]
	if t == nil {
		t = &modelTerm{persons: map[string]modelPerson{}}
		m[dev] = t
	}
	return t
}

func (m model) clone() model {
	c := model{}
	for dev, t := range m {
		c[dev] = &modelTerm{whole: t.whole, persons: maps.Clone(t.persons)}
	}
	return c
}

// testOp is one random operation, applied the same way to a Store and to a model.
type testOp struct {
	kind byte // opSet, opDelete, 'W' replace, opExclude, opInclude, opForget
	dev  string
	rec  Record
	id   string
	rev  face.Rev
	list []Record
}

func (o testOp) String() string {
	switch o.kind {
	case 'W':
		return fmt.Sprintf("Replace(%s, %d persons)", o.dev, len(o.list))
	case opSet:
		return fmt.Sprintf("Set(%s, %+v)", o.dev, o.rec)
	}
	return fmt.Sprintf("%c(%s, %s, %s)", o.kind, o.dev, o.id, o.rev)
}

// genRecord draws a record from a small space, so that terminals share records and a
// person's record changes back and forth.
func genRecord(rng *rand.Rand, ids int) Record {
	r := Record{ID: fmt.Sprintf("p%03d", rng.IntN(ids)), Name: []string{"Ann", "Bo", "Cy"}[rng.IntN(3)]}
	if rng.IntN(3) == 0 {
		r.ValidTo = "2027-01-01T00:00:00Z"
	}
	if rng.IntN(4) == 0 {
		r.Face.SHA256 = strings.Repeat(string("0a"[rng.IntN(2)]), 64)
		// Records differing only in the face's size or kind share a rev.
		if rng.IntN(2) == 0 {
			r.Face.Size = 1 + rng.IntN(2)
			r.Face.Kind = []face.FaceKind{"", face.FaceTemplate, face.FacePhoto}[rng.IntN(3)]
		}
	}
	return r
}

// opGen draws random operations. Exclude and Include name a record set recently, so that
// they often find it (a random record would rarely be the one desired).
type opGen struct {
	rng    *rand.Rand
	recent [8]Record
}

func (g *opGen) op(devs, ids int) testOp {
	rng := g.rng
	o := testOp{dev: fmt.Sprintf("d%d", rng.IntN(devs))}
	switch n := rng.IntN(100); {
	case n < 45:
		o.kind, o.rec = opSet, genRecord(rng, ids)
		g.recent[rng.IntN(len(g.recent))] = o.rec
	case n < 65:
		o.kind, o.id = opDelete, fmt.Sprintf("p%03d", rng.IntN(ids))
	case n < 73:
		o.kind = 'W'
		seen := map[string]bool{}
		for range rng.IntN(ids) {
			r := genRecord(rng, ids)
			if !seen[r.ID] {
				seen[r.ID] = true
				o.list = append(o.list, r)
			}
		}
	case n < 87, n < 97:
		o.kind = opExclude
		if n >= 87 {
			o.kind = opInclude
		}
		r := g.recent[rng.IntN(len(g.recent))]
		o.id, o.rev = r.ID, r.Rev()
		if r.ID == "" {
			o.id = "p000"
		}
	default:
		o.kind = opForget
	}
	return o
}

func (o testOp) applyStore(s *Store) error {
	var err error
	switch o.kind {
	case opSet:
		err = s.Set(o.dev, o.rec)
	case opDelete:
		err = s.Delete(o.dev, o.id)
	case 'W':
		_, err = s.Replace(o.dev, o.list)
	case opExclude:
		_, err = s.Exclude(o.dev, o.id, o.rev)
	case opInclude:
		_, err = s.Include(o.dev, o.id, o.rev)
	case opForget:
		err = s.Forget(o.dev)
	}
	return err
}

func (o testOp) applyModel(m model) {
	switch o.kind {
	case opSet:
		m.term(o.dev).persons[o.rec.ID] = modelPerson{rec: o.rec}
	case opDelete: // a terminal named by a delete is known from then on
		delete(m.term(o.dev).persons, o.id)
	case 'W':
		t := m.term(o.dev)
		t.whole = true
		t.persons = map[string]modelPerson{}
		for _, r := range o.list {
			t.persons[r.ID] = modelPerson{rec: r}
		}
	case opExclude, opInclude:
		if t := m[o.dev]; t != nil {
			if p, ok := t.persons[o.id]; ok && p.rec.Rev() == o.rev && p.excl == (o.kind == opInclude) {
				p.excl = !p.excl
				t.persons[o.id] = p
			}
		}
	case opForget:
		delete(m, o.dev)
	}
}

// modelDigest recomputes a terminal's digest from the whole list.
func modelDigest(t *modelTerm) face.Digest {
	var d face.Digest
	for id, p := range t.persons {
		if !p.excl {
			d.Toggle(id, p.rec.Rev())
		}
	}
	return d
}

// storeModel reads s's whole state, excluded persons included, into a model.
func storeModel(s *Store) model {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := model{}
	for dev, tm := range s.st.terms {
		t := m.term(dev)
		t.whole = tm.whole
		for _, c := range tm.chunks {
			for _, r := range c.refs {
				off := 0
				rec, _ := parseFields(s.st.recs[r&^excluded].data, &off)
				t.persons[rec.ID] = modelPerson{rec: rec, excl: r&excluded != 0}
			}
		}
	}
	return m
}

func modelsEqual(a, b model) bool {
	return maps.EqualFunc(a, b, func(x, y *modelTerm) bool {
		return x.whole == y.whole && maps.Equal(x.persons, y.persons)
	})
}

// checkAgainst checks every invariant of s against m: the terminals, each desired list
// (read by Page in small pages) equal to the model's, records, exclusions, counts, and the
// digest kept incrementally equal to the digest recomputed from the list.
func checkAgainst(t testing.TB, s *Store, m model) {
	t.Helper()
	if got, want := s.Terminals(), slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
		t.Fatalf("terminals %v, model %v", got, want)
	}
	for dev, mt := range m {
		var want []Entry
		for _, id := range slices.Sorted(maps.Keys(mt.persons)) {
			p := mt.persons[id]
			if s.Excluded(dev, id) != p.excl {
				t.Fatalf("%s/%s: excluded %v, model %v", dev, id, !p.excl, p.excl)
			}
			if p.excl {
				continue
			}
			want = append(want, Entry{ID: id, Rev: p.rec.Rev()})
			if r, ok := s.Get(dev, id); !ok || r != p.rec {
				t.Fatalf("%s/%s: record %+v %v, model %+v", dev, id, r, ok, p.rec)
			}
		}
		var got []Entry
		after := ""
		for {
			page := s.Page(dev, after, 3, nil)
			got = append(got, page...)
			if len(page) < 3 {
				break
			}
			after = page[len(page)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: desired list\n%v\nmodel\n%v", dev, got, want)
		}
		var d face.Digest
		for _, e := range got {
			d.Toggle(e.ID, e.Rev)
		}
		if s.Digest(dev) != d || d != modelDigest(mt) {
			t.Fatalf("%s: digest %s, recomputed from the list %s, model %s", dev, s.Digest(dev), d, modelDigest(mt))
		}
		if s.Count(dev) != len(want) {
			t.Fatalf("%s: count %d, list %d", dev, s.Count(dev), len(want))
		}
		if known, whole := s.Known(dev); !known || whole != mt.whole {
			t.Fatalf("%s: known %v whole %v, model whole %v", dev, known, whole, mt.whole)
		}
	}
	// The face set is the faces of every person's record, excluded ones included.
	wantFaces := map[[32]byte]struct{}{}
	for _, mt := range m {
		for _, p := range mt.persons {
			if p.rec.Face.SHA256 != "" {
				var sum [32]byte
				hex.Decode(sum[:], []byte(p.rec.Face.SHA256))
				wantFaces[sum] = struct{}{}
			}
		}
	}
	if got, err := s.Faces(); err != nil || !maps.Equal(got, wantFaces) {
		t.Fatalf("faces %d %v, model %d", len(got), err, len(wantFaces))
	}
	// Every record in use is referred to; none is kept for nothing.
	s.mu.Lock()
	defer s.mu.Unlock()
	used := map[uint32]bool{}
	for _, tm := range s.st.terms {
		n := 0
		for ci, c := range tm.chunks {
			// Canonical cuts: equal lists share their chunks whatever their history.
			if len(c.refs) == 0 {
				t.Fatalf("an empty chunk")
			}
			for i, r := range c.refs {
				used[r&^excluded] = true
				n++
				last := i == len(c.refs)-1
				if s.st.boundary(r) != last && (!last || ci != len(tm.chunks)-1) {
					t.Fatalf("chunk %d of %d: member %d of %d is a boundary: %v", ci, len(tm.chunks), i, len(c.refs), s.st.boundary(r))
				}
			}
		}
		if n != tm.members {
			t.Fatalf("members %d, chunks hold %d", tm.members, n)
		}
	}
	if len(used) != s.st.live {
		t.Fatalf("%d records live, %d in use", s.st.live, len(used))
	}
}
