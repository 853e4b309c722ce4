package face

import (
	"bytes"
	"testing"
)

// A v1 person keeps every v1 field in msgp, empty ones too (the bytes v1 terminals were
// built against); a v2 person leaves the empty ones out, as JSON does, and decodes back to
// itself.
func TestPersonMsgLeavesEmptyFieldsOutOfV2Only(t *testing.T) {
	const sha = "388d24ccb9b4d188ef672044e2d446661496270964cb12e554800d70261de375"
	keys := []string{"name", "validFrom", "validTo"}
	for _, c := range []struct {
		name    string
		p       Person
		present []string // of keys
	}{
		{"v1, nothing but the id", Person{ID: "951"}, keys},
		{"v1, all fields", Person{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z"}, keys},
		{"v2, nothing but the id", Person{ID: "951", Rev: "0123456789abcdef"}, nil},
		{"v2, a name", Person{ID: "951", Name: "Li Lei", Rev: "0123456789abcdef"}, []string{"name"}},
		{"v2, an end date and a face", Person{ID: "951", ValidTo: "2027-01-01T00:00:00Z", Rev: "0123456789abcdef",
			Face: FaceRef{SHA256: sha, Size: 1024, Kind: FaceTemplate}}, []string{"validTo"}},
		{"v2, all fields", Person{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z",
			Rev: "0123456789abcdef", Face: FaceRef{SHA256: sha}}, keys},
	} {
		cmd := Command{MessageID: "m-1", Op: AddPerson, Person: c.p}
		b, err := cmd.AppendMsg(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, k := range keys {
			key := append([]byte{0xa0 | byte(len(k))}, k...)
			want := false
			for _, p := range c.present {
				want = want || p == k
			}
			if got := bytes.Contains(b, key); got != want {
				t.Errorf("%s: key %q written %v, want %v\n% x", c.name, k, got, want, b)
			}
		}
		back, err := ParseCommandMsg(b)
		if err != nil || !back.Equal(&cmd) {
			t.Errorf("%s: decoded as %+v (%v), want %+v", c.name, back.Person, err, c.p)
		}
		if size := cmd.Msgsize(); len(b) > size {
			t.Errorf("%s: %d bytes, beyond Msgsize %d", c.name, len(b), size)
		}
	}
}

// The v1 DeletePerson of docs/protocol.md, byte for byte: four entries, the empty strings
// included.
func TestPersonMsgV1Bytes(t *testing.T) {
	cmd := Command{MessageID: "m-1", Op: DeletePerson, Person: Person{ID: "951"}}
	b, err := cmd.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x84, 0xa2, 'i', 'd', 0xa3, '9', '5', '1', 0xa4, 'n', 'a', 'm', 'e', 0xa0,
		0xa9, 'v', 'a', 'l', 'i', 'd', 'F', 'r', 'o', 'm', 0xa0, 0xa7, 'v', 'a', 'l', 'i', 'd', 'T', 'o', 0xa0}
	if !bytes.HasSuffix(b, want) || len(b) != 72 {
		t.Fatalf("encoded as\n% x\nwant 72 bytes ending in\n% x", b, want)
	}
}
