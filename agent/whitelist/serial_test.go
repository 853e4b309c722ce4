package whitelist

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Serials survive a reopen, through the journal and through a snapshot; they are
// independent of the lists (Forget keeps them, a serial makes no terminal Known), bounded
// by MaxTerminals and MaxIDLen, and "" forgets one.
func TestSerialsPersist(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{MaxTerminals: 3})
	for dev, serial := range map[string]string{"a": "SN-a-1", "b": "SN-b-1", "c": "SN-c-1"} {
		if err := s.SetSerial(dev, serial); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetSerial("d", "SN-d-1"); !errors.Is(err, ErrTooManyTerminals) {
		t.Fatalf("a fourth serial with MaxTerminals 3: %v", err)
	}
	if err := s.SetSerial("a", strings.Repeat("x", MaxIDLen+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a serial over MaxIDLen: %v", err)
	}
	if known, _ := s.Known("a"); known {
		t.Fatal("a serial made the terminal known")
	}
	if err := s.Set("a", Record{ID: "1", Name: "Ann"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSerial("b", "SN-b-2"); err != nil { // replaced
		t.Fatal(err)
	}
	if err := s.SetSerial("c", ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "SN-a-1", "b": "SN-b-2", "c": "", "d": ""}
	check := func(s *Store, when string) {
		t.Helper()
		for dev, serial := range want {
			if got := s.Serial(dev); got != serial {
				t.Errorf("%s: serial of %s %q, want %q", when, dev, got, serial)
			}
		}
	}
	check(s, "live")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{MaxTerminals: 3})
	check(s, "after a reopen")
	if err := s.Set("b", Record{ID: "2", Name: "Bo"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSerial("d", "SN-d-1"); err != nil { // after the snapshot, in the journal
		t.Fatal(err)
	}
	want["d"] = "SN-d-1"
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{MaxTerminals: 3})
	check(s, "after a snapshot and a reopen")
	if known, _ := s.Known("b"); !known || s.Count("b") != 1 {
		t.Errorf("b's list after the snapshot: known %v count %d", known, s.Count("b"))
	}
}

// A snapshot of many serials is cut into records under 64 KiB, and replays whole.
func TestSerialsSnapshotOfMany(t *testing.T) {
	dir := t.TempDir()
	const n = 1000
	s := openTest(t, dir, Options{MaxTerminals: n})
	for i := range n {
		if err := s.SetSerial(fmt.Sprintf("dev-%04d", i), strings.Repeat("s", 100)+fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{MaxTerminals: n})
	for i := range n {
		if got, want := s.Serial(fmt.Sprintf("dev-%04d", i)), strings.Repeat("s", 100)+fmt.Sprint(i); got != want {
			t.Fatalf("dev-%04d: %q, want %q", i, got, want)
		}
	}
}
