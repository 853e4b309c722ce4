package whitelist

import (
	"bytes"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// FuzzParseRecord feeds arbitrary bytes to the record decoder: it never panics, and a
// record it accepts encodes back to the same bytes (for updates) — what replay believes
// is what was written.
func FuzzParseRecord(f *testing.F) {
	r := Record{ID: "951", Name: "Li Lei", ValidTo: "2027-01-01T00:00:00Z", Face: face.FaceRef{SHA256: "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"}}
	upd := appendUpdateHeader(nil, kindOps, flagWhole, "2042253")
	upd = append(upd, opSet)
	upd = appendFields(upd, &r)
	rev := r.Rev()
	upd = append(append(upd, opSetRef), rev[:]...)
	upd = appendString(append(upd, opDelete), "7")
	upd = append(appendString(append(upd, opExclude), "8"), rev[:]...)
	f.Add(upd)
	f.Add(append(appendUpdateHeader(nil, kindOps, 0, "d"), opForget))
	f.Add(appendFields([]byte{recordVersion, kindRecords}, &r))
	f.Add([]byte{recordVersion, kindTerminal, 1, 1, 'd', 0, 0, 0, 0, 0, 0, 0, 0, 2, 4, 5})
	f.Add([]byte{recordVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		rr, err := parseRecord(b)
		if err != nil || (rr.kind != kindOps && rr.kind != kindPart && rr.kind != kindLast) {
			return
		}
		again := appendUpdateHeader(nil, rr.kind, rr.flags, rr.dev)
		for _, o := range rr.ops {
			switch o.kind {
			case opSet:
				again = appendFields(append(again, opSet), &o.rec)
			case opSetRef:
				again = append(append(again, opSetRef), o.rev[:]...)
			case opDelete:
				again = appendString(append(again, opDelete), o.id)
			case opExclude, opInclude:
				again = append(appendString(append(again, o.kind), o.id), o.rev[:]...)
			case opForget:
				again = append(again, opForget)
			}
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decoded %+v, which encodes to\n%x\nnot\n%x", rr, again, b)
		}
	})
}

func TestParseRecordRefusesLongVarints(t *testing.T) {
	b := append(appendUpdateHeader(nil, kindOps, 0, "d"), opDelete, 0x81, 0x00, 'x')
	if _, err := parseRecord(b); err == nil {
		t.Fatal("a length in a longer form than needed was accepted")
	}
}
