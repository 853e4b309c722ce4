package face

import (
	"errors"
	"fmt"
	"testing"
)

// A msgp array header says how many elements follow before any of them is read. A header
// claiming two billion persons must be refused, not believed: the decoder would allocate
// the slice first (tens of gigabytes) and the process would die before noticing that the
// bytes are missing.
func TestMsgArrayHeaderNotBelieved(t *testing.T) {
	b, err := (&Ack{MessageID: "m"}).MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	b[0]++ // one more field in the ack's map: persons
	b = append(b, 0xa7)
	b = append(b, "persons"...)
	b = append(b, 0xdd, 0x7f, 0xff, 0xff, 0xff) // array32 of 2^31-1 elements, none present
	if _, err := ParseAckMsg(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge persons array header: %v", err)
	}
}

// The msgp decoder's array bound (the limit= in the struct tags) is the protocol's: a
// page of MaxListLimit persons decodes, one more does not.
func TestMsgArrayLimitIsTheProtocolBound(t *testing.T) {
	page := func(n int) []byte {
		a := Ack{MessageID: "m", Persons: make([]PersonRev, n)}
		for i := range a.Persons {
			a.Persons[i] = PersonRev{ID: fmt.Sprintf("%06d", i), Rev: "ed8b5c1121eda4fa"}
		}
		b, err := a.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := ParseAckMsg(page(MaxListLimit)); err != nil {
		t.Fatalf("a full page: %v", err)
	}
	if _, err := ParseAckMsg(page(MaxListLimit + 1)); err == nil {
		t.Fatal("a page over MaxListLimit decoded")
	}
}
