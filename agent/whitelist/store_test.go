package whitelist

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// siteList is n persons as a site's back office would send them; variant changes every
// record (another site, or every terminal its own list).
func siteList(n, variant int) []Record {
	list := make([]Record, n)
	for i := range list {
		list[i] = Record{ID: fmt.Sprintf("%08d", i+variant*n), Name: fmt.Sprintf("Person %d of site %d", i, variant),
			ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-12-31T23:59:59Z"}
	}
	return list
}

func openTest(t testing.TB, dir string, opt Options) *Store {
	t.Helper()
	if opt.Journal.Sync == journal.SyncAlways {
		opt.Journal.Sync = journal.SyncNone // durability has its own tests
	}
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestReplaceCounts(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{})
	a := Record{ID: "1", Name: "Ann"}
	b := Record{ID: "2", Name: "Bo"}
	c := Record{ID: "3", Name: "Cy"}
	if n, err := s.Replace("d", []Record{a, b}); err != nil || n != (Counts{Added: 2}) {
		t.Fatalf("first Replace: %+v %v", n, err)
	}
	b2 := Record{ID: "2", Name: "Bob"}
	if n, err := s.Replace("d", []Record{c, b2, a}); err != nil || n != (Counts{Added: 2, Unchanged: 1}) {
		t.Fatalf("second Replace: %+v %v", n, err)
	}
	if ok, err := s.Exclude("d", "3", c.Rev()); !ok || err != nil {
		t.Fatalf("Exclude: %v %v", ok, err)
	}
	// The excluded person is not desired: listing it again adds it; not listing it deletes
	// nobody desired.
	if n, err := s.Replace("d", []Record{a, c}); err != nil || n != (Counts{Added: 1, Deleted: 1, Unchanged: 1}) {
		t.Fatalf("third Replace: %+v %v", n, err)
	}
	if _, err := s.Replace("d", []Record{a, a}); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("a list naming a person twice: %v", err)
	}
	m := model{}
	m.term("d").whole = true
	m["d"].persons["1"] = modelPerson{rec: a}
	m["d"].persons["3"] = modelPerson{rec: c}
	checkAgainst(t, s, m)
}

func TestExcludeOnlyTheRefusedRecord(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{})
	old := Record{ID: "7", Name: "Old"}
	nw := Record{ID: "7", Name: "New"}
	s.Set("d", old)
	s.Set("d", nw)
	// The terminal refused the older record: the newer one stays desired.
	if ok, _ := s.Exclude("d", "7", old.Rev()); ok || s.Count("d") != 1 {
		t.Fatalf("excluded on a stale refusal: %v, count %d", ok, s.Count("d"))
	}
	if ok, _ := s.Exclude("d", "7", nw.Rev()); !ok || s.Count("d") != 0 || s.Digest("d") != 0 {
		t.Fatalf("Exclude of the latest record: %v, count %d digest %s", ok, s.Count("d"), s.Digest("d"))
	}
	if _, ok := s.Get("d", "7"); ok {
		t.Fatal("an excluded person is desired")
	}
	// It survives a restart, compacted or not.
	dir := s.j.Dir()
	s.Compact()
	s.Close()
	s = openTest(t, dir, Options{})
	if !s.Excluded("d", "7") || s.Count("d") != 0 {
		t.Fatalf("after reopen: excluded %v count %d", s.Excluded("d", "7"), s.Count("d"))
	}
	// A later task sets it again, even with the same record.
	s.Set("d", nw)
	var want face.Digest
	want.Toggle("7", nw.Rev())
	if s.Excluded("d", "7") || s.Digest("d") != want {
		t.Fatalf("Set did not include it again: digest %s want %s", s.Digest("d"), want)
	}
}

func TestBounds(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{MaxTerminals: 2, MaxPersons: 3, MaxRecords: 5})
	for i := range 3 {
		if err := s.Set("a", Record{ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set("a", Record{ID: "9"}); !errors.Is(err, ErrTooManyPersons) {
		t.Fatalf("fourth person: %v", err)
	}
	if err := s.Set("a", Record{ID: "0", Name: "changed"}); err != nil {
		t.Fatalf("changing a person at the bound: %v", err)
	}
	if _, err := s.Replace("b", siteList(4, 0)); !errors.Is(err, ErrTooManyPersons) {
		t.Fatalf("Replace over MaxPersons: %v", err)
	}
	// The same records on another terminal are shared: no new record counts.
	if _, err := s.Replace("b", []Record{{ID: "0", Name: "changed"}, {ID: "1"}, {ID: "2"}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Records; got != 3 {
		t.Fatalf("records %d, want 3 shared", got)
	}
	if err := s.Set("c", Record{ID: "1"}); !errors.Is(err, ErrTooManyTerminals) {
		t.Fatalf("third terminal: %v", err)
	}
	if _, err := s.Replace("b", siteList(3, 1)); !errors.Is(err, ErrTooManyRecords) {
		t.Fatalf("Replace over MaxRecords: %v", err)
	}
	for _, step := range []func() error{
		func() error { return s.Delete("b", "2") }, func() error { return s.Set("b", Record{ID: "x"}) },
		func() error { return s.Delete("b", "1") }, func() error { return s.Set("b", Record{ID: "y"}) },
		func() error { return s.Delete("b", "0") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set("b", Record{ID: "z"}); !errors.Is(err, ErrTooManyRecords) {
		t.Fatalf("sixth record: %v", err)
	}
	for _, r := range []Record{{}, {ID: string(make([]byte, 129))}, {ID: "1", Face: face.FaceRef{SHA256: "AB"}}, {ID: "1", Name: string(make([]byte, 513))}} {
		if err := s.Set("a", r); !errors.Is(err, ErrInvalid) {
			t.Fatalf("record %+v: %v", r, err)
		}
	}
	if err := s.Set("", Record{ID: "1"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty device id: %v", err)
	}
}

func TestDiff(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{})
	list := siteList(1000, 0)
	s.Replace("d", list)
	// The terminal: every third person missing, every fifth changed, some extra.
	var held []Entry
	for i, r := range list {
		switch {
		case i%3 == 0:
		case i%5 == 0:
			r.Name = "other"
			held = append(held, Entry{r.ID, r.Rev()})
		default:
			held = append(held, Entry{r.ID, r.Rev()})
		}
		if i%7 == 0 {
			held = append(held, Entry{r.ID + "x", face.Rev{1}})
		}
	}
	var want [3]int
	for i := range list {
		switch {
		case i%3 == 0:
			want[Missing]++
		case i%5 == 0:
			want[Changed]++
		}
		if i%7 == 0 {
			want[Extra]++
		}
	}
	for _, limit := range []int{1, 7, 100, 5000} {
		d := s.Diff("d")
		var got [3]int
		last := ""
		for i := 0; ; i += limit {
			page := held[i:min(i+limit, len(held))]
			next := ""
			if i+limit < len(held) {
				next = page[len(page)-1].ID
			}
			if err := d.Page(page, next, func(c Change) {
				if c.ID <= last {
					t.Fatalf("change %v out of order", c)
				}
				last = c.ID
				got[c.Kind]++
			}); err != nil {
				t.Fatal(err)
			}
			if next == "" {
				break
			}
		}
		if got != want || d.Missing != want[Missing] {
			t.Fatalf("pages of %d: changes %v, want %v", limit, got, want)
		}
	}
	// An empty terminal: everything missing, in one page.
	d := s.Diff("d")
	n := 0
	d.Page(nil, "", func(c Change) { n++ })
	if n != len(list) {
		t.Fatalf("empty terminal: %d changes", n)
	}
	if err := s.Diff("d").Page([]Entry{{ID: "b"}, {ID: "a"}}, "", func(Change) {}); !errors.Is(err, ErrBadPage) {
		t.Fatalf("a page out of order: %v", err)
	}
}

// A record's face keeps its size and kind through the journal and a snapshot, and a
// journal written when records kept the face's hash alone replays (the hash, no size).
func TestRecordFaceKept(t *testing.T) {
	const sha = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
	full := Record{ID: "1", Name: "Ann", Face: face.FaceRef{SHA256: sha, Size: 1024, Kind: face.FaceTemplate}}
	hashOnly := Record{ID: "2", Name: "Bo", Face: face.FaceRef{SHA256: sha}}
	// The bytes the store wrote before it kept sizes and kinds: face form 1 and the hash.
	old := []byte{recordVersion, kindOps, 0, 1, 'd', opSet, 1, '3', 2, 'C', 'y', 0, 0, 1}
	for range 32 {
		old = append(old, 0x0a)
	}
	if got := appendFields(nil, &hashOnly); !bytes.Equal(got[len(got)-33:], old[len(old)-33:]) {
		t.Fatalf("a record without size or kind changed its bytes: %x", got)
	}
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	if err := s.Set("d", full); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("d", hashOnly); err != nil {
		t.Fatal(err)
	}
	if err := s.j.Append(old); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cy := Record{ID: "3", Name: "Cy", Face: face.FaceRef{SHA256: sha}}
	check := func(s *Store, when string) {
		t.Helper()
		for _, want := range []Record{full, hashOnly, cy} {
			if got, ok := s.Get("d", want.ID); !ok || got != want {
				t.Fatalf("%s: %+v %v, want %+v", when, got, ok, want)
			}
			if p := want.Person(); p.Rev != want.Rev().String() || p.Face != want.Face || p.Rev != face.PersonRecordRev(&p).String() {
				t.Fatalf("%s: person %+v", when, p)
			}
		}
	}
	s = openTest(t, dir, Options{})
	check(s, "replayed")
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir, Options{})
	check(s, "from the snapshot")
	if set, err := s.Faces(); err != nil || len(set) != 1 {
		t.Fatalf("faces %v %v", set, err)
	}
}

// TestDeleteMakesTheTerminalKnown: a DeletePerson is a task naming the terminal; its
// desired list becomes the agent's (known, empty) even when the person was not there, and
// stays so after a restart. A delete on a known terminal for a person not there writes
// nothing.
func TestDeleteMakesTheTerminalKnown(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{MaxTerminals: 1})
	if err := s.Delete("d", "nobody"); err != nil {
		t.Fatal(err)
	}
	if known, _ := s.Known("d"); !known {
		t.Fatal("a terminal named by a DeletePerson is not known")
	}
	if err := s.Delete("e", "nobody"); !errors.Is(err, ErrTooManyTerminals) {
		t.Fatalf("a second terminal past MaxTerminals 1: %v", err)
	}
	before := s.logBytes
	if err := s.Delete("d", "nobody"); err != nil || s.logBytes != before {
		t.Fatalf("a second delete of nobody: %v, %d bytes written", err, s.logBytes-before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{})
	if known, _ := s.Known("d"); !known || s.Count("d") != 0 {
		t.Fatalf("after reopening: known %v, %d persons", known, s.Count("d"))
	}
}
