package face

import (
	"testing"
)

// The vectors were computed with Python's hashlib from the definitions in docs/protocol.md,
// independently of this code: a terminal or back office implementing them gets the same.
func TestRevAndDigestVectors(t *testing.T) {
	r1 := RecordRev("1001", "Ann Lee", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "")
	r2 := RecordRev("1002", "Bo", "", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
	if r1.String() != "ed8b5c1121eda4fa" || r2.String() != "a52fa121c0a6bc36" {
		t.Fatalf("revs %s %s", r1, r2)
	}
	var d Digest
	if d.String() != "0000000000000000" {
		t.Fatalf("empty digest %s", d)
	}
	d.Toggle("1001", r1)
	if d.String() != "7173f8360fbeee7e" {
		t.Fatalf("one person: %s", d)
	}
	d.Toggle("1002", r2)
	if d.String() != "e5ebe1634f0028be" {
		t.Fatalf("two persons: %s", d)
	}
	// Order-free, and a removal undoes an add.
	var e Digest
	e.Toggle("1002", r2)
	e.Toggle("1001", r1)
	if e != d {
		t.Fatalf("order matters: %s vs %s", e, d)
	}
	e.Toggle("1002", r2)
	e.Toggle("1001", r1)
	if e != 0 {
		t.Fatalf("add then remove leaves %s", e)
	}
}

func TestParseRevAndDigest(t *testing.T) {
	r, err := ParseRev("ed8b5c1121eda4fa")
	if err != nil || r.String() != "ed8b5c1121eda4fa" {
		t.Fatalf("ParseRev: %s %v", r, err)
	}
	for _, bad := range []string{"", "ED8B5C1121EDA4FA", "ed8b5c1121eda4f", "ed8b5c1121eda4fa0", "ed8b5c1121eda4fg"} {
		if _, err := ParseRev(bad); err == nil {
			t.Errorf("ParseRev(%q) accepted", bad)
		}
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
	d, err := ParseDigest("e5ebe1634f0028be")
	if err != nil || d.String() != "e5ebe1634f0028be" {
		t.Fatalf("ParseDigest: %s %v", d, err)
	}
}

func FuzzParseRev(f *testing.F) {
	f.Add("ed8b5c1121eda4fa")
	f.Add("")
	f.Add("zzzzzzzzzzzzzzzz")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRev(s)
		if err == nil && r.String() != s {
			t.Fatalf("ParseRev(%q) round-trips to %q", s, r)
		}
	})
}

func BenchmarkDigestToggle(b *testing.B) {
	r := RecordRev("1001", "Ann Lee", "", "", "")
	var d Digest
	b.ReportAllocs()
	for b.Loop() {
		d.Toggle("1001", r)
	}
}
