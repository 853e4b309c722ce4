package face

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Protocol v2 fixtures: what parses, and the field a refusal names.
func TestParseV2Fixtures(t *testing.T) {
	cases := []struct {
		file    string
		parse   func([]byte) error
		wantErr error
		field   string
	}{
		{"command-list.json", parseCmd, nil, ""},
		{"command-list-first.json", parseCmd, nil, ""},
		{"command-list-limit-too-big.json", parseCmd, ErrInvalid, "limit"},
		{"command-list-limit-negative.json", parseCmd, ErrInvalid, "limit"},
		{"command-add-rev.json", parseCmd, nil, ""},
		{"command-add-bad-rev.json", parseCmd, ErrInvalid, "person.rev"},
		{"command-future-op.json", parseCmd, ErrUnknownOp, "op"},
		{"ack-list.json", parseAck, nil, ""},
		{"ack-list-end.json", parseAck, nil, ""},
		{"ack-list-null.json", parseAck, nil, ""},
		// encoding/json decodes a repeated array into the elements the first one left:
		// one person, id 1002 with 1001's rev. The plain path leaves it the same answer.
		{"ack-list-persons-twice.json", parseAck, nil, ""},
		{"ack-list-unsorted.json", parseAck, ErrInvalid, "persons[1].id"},
		{"ack-list-bad-rev.json", parseAck, ErrInvalid, "persons[0].rev"},
		{"ack-list-no-rev.json", parseAck, ErrInvalid, "persons[0].rev"},
		{"ack-list-next-wrong.json", parseAck, ErrInvalid, "next"},
		{"heartbeat-v2.json", parseHB, nil, ""},
		{"heartbeat-v2-no-digest.json", parseHB, ErrInvalid, "digest"},
		{"heartbeat-v2-bad-digest.json", parseHB, ErrInvalid, "digest"},
		{"heartbeat-v3-unknown-field.json", parseHB, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			err := c.parse(readTestdata(t, c.file))
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var fe *Error
			if !errors.Is(err, c.wantErr) || !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("error %v (%#v), want %v naming %q", err, err, c.wantErr, c.field)
			}
		})
	}
}

func TestParseV2Values(t *testing.T) {
	c, err := ParseCommandJSON(readTestdata(t, "command-list.json"))
	if want := (Command{MessageID: "ListPersons-3", Op: ListPersons, After: "1001", Limit: 2}); err != nil || !c.Equal(&want) || c.PageSize() != 2 {
		t.Fatalf("command: %+v %v", c, err)
	}
	c, _ = ParseCommandJSON(readTestdata(t, "command-list-first.json"))
	if c.After != "" || c.Limit != 0 || c.PageSize() != DefaultListLimit {
		t.Fatalf("first page: %+v, page size %d", c, c.PageSize())
	}
	a, err := ParseAckJSON(readTestdata(t, "ack-list.json"))
	want := Ack{MessageID: "ListPersons-3", Persons: []PersonRev{{"1001", "ed8b5c1121eda4fa"}, {"1002", "a52fa121c0a6bc36"}}, Next: "1002"}
	if err != nil || !reflect.DeepEqual(a, want) {
		t.Fatalf("ack: %+v %v", a, err)
	}
	h, err := ParseHeartbeatJSON(readTestdata(t, "heartbeat-v2.json"))
	wantH := Heartbeat{DeviceID: "2042253", Time: "2026-11-22T10:00:00Z", Firmware: "v4.0.0", Persons: 2,
		Protocol: 2, Serial: "SN-00417", Digest: "e5ebe1634f0028be", Capacity: 50000, Batch: 50}
	if err != nil || h != wantH || h.Version() != 2 {
		t.Fatalf("heartbeat: %+v %v", h, err)
	}
	h, _ = ParseHeartbeatJSON(readTestdata(t, "heartbeat.json"))
	if h.Version() != 1 || h.Digest != "" {
		t.Fatalf("v1 heartbeat: %+v version %d", h, h.Version())
	}
}

// A command with an op this package does not know comes back with its messageId, so a
// terminal can refuse it with an ack; any other invalid command comes back zero.
func TestUnknownOpKeepsTheCommand(t *testing.T) {
	b := readTestdata(t, "command-future-op.json")
	c, err := ParseCommandJSON(b)
	if !errors.Is(err, ErrUnknownOp) || !errors.Is(err, ErrInvalid) || c.MessageID != "m-9" || c.Op != "SetDoorMode" {
		t.Fatalf("JSON: %+v %v", c, err)
	}
	m, _ := (&Command{MessageID: "m-9", Op: "SetDoorMode"}).MarshalMsg(nil)
	c, err = ParseCommandMsg(m)
	if !errors.Is(err, ErrUnknownOp) || c.MessageID != "m-9" {
		t.Fatalf("msgp: %+v %v", c, err)
	}
	c, err = ParseCommandJSON(readTestdata(t, "command-list-limit-too-big.json"))
	if err == nil || errors.Is(err, ErrUnknownOp) || !c.Equal(&Command{}) {
		t.Fatalf("invalid ListPersons: %+v %v", c, err)
	}
}

func TestV2MsgRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{MessageID: "l-1", Op: ListPersons},
		{MessageID: "l-2", Op: ListPersons, After: "1001", Limit: MaxListLimit},
		{MessageID: "a-1", Op: AddPerson, Person: Person{ID: "1001", Rev: "ed8b5c1121eda4fa"}},
	} {
		b, err := c.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ParseCommandMsg(b); err != nil || !got.Equal(&c) {
			t.Fatalf("command %+v: %+v %v", c, got, err)
		}
	}
	// A ListPersons carries no person in either encoding.
	b, _ := (&Command{MessageID: "l-1", Op: ListPersons, Limit: 5}).AppendMsg(nil)
	j, _ := (&Command{MessageID: "l-1", Op: ListPersons, Limit: 5}).AppendJSON(nil)
	if bytes.Contains(b, []byte("person")) || string(j) != `{"messageId":"l-1","op":"ListPersons","limit":5}` {
		t.Fatalf("ListPersons carries a person: %x %s", b, j)
	}
	a := Ack{MessageID: "l-1", Persons: []PersonRev{{"1001", "ed8b5c1121eda4fa"}}, Next: "1001"}
	b, _ = a.AppendMsg(nil)
	if got, err := ParseAckMsg(b); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("ack: %+v %v", got, err)
	}
	// An empty page: [] in msgp decodes as no persons, as does an absent field.
	b, _ = (&Ack{MessageID: "l-2", Persons: []PersonRev{}}).AppendMsg(nil)
	if got, err := ParseAckMsg(b); err != nil || len(got.Persons) != 0 || got.Next != "" {
		t.Fatalf("empty page: %+v %v", got, err)
	}
	h := Heartbeat{DeviceID: "d", Persons: 2, Protocol: 2, Serial: "SN-1", Digest: "e5ebe1634f0028be", Capacity: 10, Batch: 5}
	b, _ = h.AppendMsg(nil)
	if got, err := ParseHeartbeatMsg(b); err != nil || got != h {
		t.Fatalf("heartbeat: %+v %v", got, err)
	}
	// A msgp ack page out of order is refused as in JSON.
	a.Persons = []PersonRev{{"2", "ed8b5c1121eda4fa"}, {"1", "ed8b5c1121eda4fa"}}
	a.Next = ""
	b, _ = a.MarshalMsg(nil)
	if _, err := ParseAckMsg(b); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "persons[1].id") {
		t.Fatalf("unsorted msgp page: %v", err)
	}
}

func TestV2Bounds(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	rev := "ed8b5c1121eda4fa"
	page := func(n int) []PersonRev {
		out := make([]PersonRev, n)
		for i := range out {
			out[i] = PersonRev{fmt.Sprintf("%06d", i), rev}
		}
		return out
	}
	for _, c := range []struct {
		v     interface{ Validate() error }
		field string // "" valid
	}{
		{&Command{MessageID: "m", Op: ListPersons, After: long}, "after"},
		{&Command{MessageID: "m", Op: ListPersons, After: long[1:], Limit: MaxListLimit}, ""},
		{&Command{MessageID: "m", Op: ListPersons, Limit: MaxListLimit + 1}, "limit"},
		{&Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "p", Rev: "ed8b5c1121eda4f"}}, "person.rev"},
		{&Ack{MessageID: "m", Persons: page(MaxListLimit), Next: fmt.Sprintf("%06d", MaxListLimit-1)}, ""},
		{&Ack{MessageID: "m", Persons: page(MaxListLimit + 1)}, "persons"},
		{&Ack{MessageID: "m", Persons: []PersonRev{{long, rev}}}, "persons[0].id"},
		{&Ack{MessageID: "m", Persons: []PersonRev{{"", rev}}}, "persons[0].id"},
		{&Ack{MessageID: "m", Persons: []PersonRev{{"a", rev}, {"a", rev}}}, "persons[1].id"},
		{&Ack{MessageID: "m", Next: "a"}, "next"},
		{&Ack{MessageID: "m", Persons: []PersonRev{{"a", rev}}, Next: long}, "next"},
		{&Heartbeat{Protocol: -1}, "protocol"},
		{&Heartbeat{Serial: long}, "serial"},
		{&Heartbeat{Protocol: 2}, "digest"},
		{&Heartbeat{Protocol: 2, Digest: "0000000000000000"}, ""},
		{&Heartbeat{Digest: "00"}, "digest"},
		{&Heartbeat{Capacity: -1}, "capacity"},
		{&Heartbeat{Batch: -1}, "batch"},
	} {
		err := c.v.Validate()
		var fe *Error
		if c.field == "" && err != nil || c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%+v: %v, want field %q", c.v, err, c.field)
		}
	}
}

// The largest page ListLimitFor allows fits, every field at its bound; one more does not.
func TestListLimitFor(t *testing.T) {
	worst := func(n int) int {
		a := Ack{MessageID: strings.Repeat("m", MaxIDLen), Code: math.MinInt, Message: strings.Repeat("w", MaxTextLen)}
		for i := range n {
			a.Persons = append(a.Persons, PersonRev{fmt.Sprintf("%0*d", MaxIDLen, i), "ed8b5c1121eda4fa"})
		}
		if n > 0 {
			a.Next = a.Persons[n-1].ID
		}
		b, err := a.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	if math.MaxInt == math.MaxInt32 {
		t.Skip("the worst case is a 64-bit code")
	}
	for _, size := range []int{1024, 4096, 8192, 65535} {
		n := ListLimitFor(size)
		if got := worst(n); got > size {
			t.Errorf("ListLimitFor(%d) = %d: the page takes %d bytes", size, n, got)
		}
		if got := worst(n + 1); n < MaxListLimit && got <= size {
			t.Errorf("ListLimitFor(%d) = %d, but %d persons fit (%d bytes)", size, n, n+1, got)
		}
	}
	if ListLimitFor(10) != 1 || ListLimitFor(1<<30) != MaxListLimit {
		t.Fatalf("ListLimitFor bounds: %d %d", ListLimitFor(10), ListLimitFor(1<<30))
	}
	if n := ListLimitFor(4096); n < 20 {
		t.Fatalf("a 4 KiB serial frame holds only %d persons", n)
	}
}

// The v2 messages' JSON is json.Marshal's for any field values, and what validates
// survives both codecs unchanged.
func FuzzEncodeV2JSON(f *testing.F) {
	f.Add("ListPersons-1", "1001", 100, "1001\n1002", "ed8b5c1121eda4fa", 2, "SN-1", "e5ebe1634f0028be")
	f.Add("", "", 0, "", "", 0, "", "")
	f.Add("<&>", "\u2028", -1, "b\na", "ED8B5C1121EDA4FA", 3, "\xff", "0000000000000000")
	f.Add("m", "x", 1001, "a\n\nb", "zz", -1, "s", "00")
	f.Fuzz(func(t *testing.T, id, after string, limit int, ids, rev string, protocol int, serial, digest string) {
		c := Command{MessageID: id, Op: ListPersons, After: after, Limit: limit}
		want, _ := json.Marshal(&c)
		if got := appendCommandJSON(nil, &c); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", c, got, want)
		}
		c.Op, c.Person = AddPerson, Person{ID: after, Rev: rev}
		want, _ = json.Marshal(&c)
		if got := appendCommandJSON(nil, &c); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", c, got, want)
		}
		a := Ack{MessageID: id, Code: limit, Next: after}
		if ids != "" {
			for _, pid := range strings.Split(ids, "\n") {
				a.Persons = append(a.Persons, PersonRev{pid, rev})
			}
		}
		want, _ = json.Marshal(&a)
		if got := appendAckJSON(nil, &a); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", a, got, want)
		}
		h := Heartbeat{DeviceID: id, Persons: limit, Protocol: protocol, Serial: serial, Digest: digest, Capacity: limit, Batch: protocol}
		want, _ = json.Marshal(&h)
		if got := appendHeartbeatJSON(nil, &h); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", h, got, want)
		}
		for _, s := range []string{id, after, ids, rev, serial, digest} {
			if !utf8.ValidString(s) {
				return // JSON writes invalid UTF-8 as U+FFFD, msgp keeps the bytes: no common answer
			}
		}
		for _, v := range []interface {
			encoder
			Validate() error
		}{&c, &a, &h} {
			if v.Validate() != nil {
				continue
			}
			j, _ := v.AppendJSON(nil)
			m, _ := v.AppendMsg(nil)
			checkParsersAgree(t, j)
			var backJ, backM any
			switch v.(type) {
			case *Command:
				backJ, _ = ParseCommandJSON(j)
				backM, _ = ParseCommandMsg(m)
			case *Ack:
				ja, _ := ParseAckJSON(j)
				ma, _ := ParseAckMsg(m)
				if len(ma.Persons) == 0 && len(ja.Persons) == 0 {
					ja.Persons, ma.Persons = nil, nil // [] and absent are the same page
				}
				backJ, backM = ja, ma
			case *Heartbeat:
				backJ, _ = ParseHeartbeatJSON(j)
				backM, _ = ParseHeartbeatMsg(m)
			}
			if !reflect.DeepEqual(backJ, backM) {
				t.Fatalf("JSON and msgp disagree:\n%#v\n%#v", backJ, backM)
			}
		}
	})
}
