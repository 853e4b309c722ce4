package face

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// The reference: the JSON codec as it was before jsonplain.go, on encoding/json alone.
// The hand-written codec must give the same bytes and the same answers.

func refAppendJSON(dst []byte, v interface{ Validate() error }) ([]byte, error) {
	if err := v.Validate(); err != nil {
		return dst, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func refParseCommandJSON(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, malformed("command", err)
	}
	if err := c.Validate(); err != nil {
		if errors.Is(err, ErrUnknownOp) {
			return c, err
		}
		return Command{}, err
	}
	return c, nil
}

func refParseAckJSON(b []byte) (Ack, error) {
	var raw struct {
		MessageID string      `json:"messageId"`
		Code      *int        `json:"code"`
		Message   string      `json:"message"`
		Persons   []PersonRev `json:"persons"`
		Next      string      `json:"next"`
		Have      int         `json:"have"`
		Results   []Result    `json:"results"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Ack{}, malformed("ack", err)
	}
	a := Ack{MessageID: raw.MessageID, Message: raw.Message, Persons: raw.Persons, Next: raw.Next,
		Have: raw.Have, Results: raw.Results}
	if err := a.Validate(); err != nil {
		return Ack{}, err
	}
	if raw.Code == nil {
		return Ack{}, invalid("ack", "code", "missing")
	}
	a.Code = *raw.Code
	return a, nil
}

func refParseHeartbeatJSON(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := json.Unmarshal(b, &h); err != nil {
		return Heartbeat{}, malformed("heartbeat", err)
	}
	if err := h.Validate(); err != nil {
		return Heartbeat{}, err
	}
	return h, nil
}

// hardStrings are texts that exercise every branch of AppendJSONString.
var hardStrings = []string{
	"", "951", "Li Lei", "李雷", "Zoë Müller", "emoji 😀",
	`quote " backslash \ slash /`, "<b> & </b>", "ctl \x00\x01\x1f\x7f \b\f\n\r\t",
	"bad utf-8 \xff\xfe \xc3", "line sep \u2028 para sep \u2029", "\ufffd replacement",
	strings.Repeat("x", MaxIDLen), strings.Repeat("é", MaxIDLen/2),
}

func TestAppendJSONSameAsMarshal(t *testing.T) {
	var cmds []Command
	for _, op := range []Op{AddPerson, DeletePerson, "", "Unknown"} {
		cmds = append(cmds,
			Command{MessageID: "m-1", Op: op, Person: Person{ID: "p"}},
			Command{MessageID: "EditPerson-951-1494527067538440192", Op: op,
				Person: Person{ID: "951", Name: "李雷", ValidFrom: "2026-01-01T00:00:00+08:00", ValidTo: "2027-01-01T00:00:00Z"}},
			Command{MessageID: "m-2", Op: op, Person: Person{ID: "p", ValidTo: "2027-01-01T00:00:00Z"}},
			Command{MessageID: "m-3", Op: op, Person: Person{ID: "p", ValidFrom: "2027-01-01T00:00:00.123456789-07:30"}},
		)
	}
	for _, s := range hardStrings {
		cmds = append(cmds,
			Command{MessageID: s, Op: AddPerson, Person: Person{ID: "p", Name: s}},
			Command{MessageID: "m", Op: DeletePerson, Person: Person{ID: s}},
		)
	}
	cmds = append(cmds,
		Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "p", Name: strings.Repeat("<", MaxTextLen)}},
		Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "p", Name: strings.Repeat("n", MaxTextLen+1)}},
		Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "p", ValidFrom: "yesterday"}},
	)
	valid := 0
	for _, c := range cmds {
		got, gotErr := c.AppendJSON([]byte("prefix"))
		want, wantErr := refAppendJSON([]byte("prefix"), &c)
		if !sameErr(gotErr, wantErr) || !bytes.Equal(got, want) {
			t.Errorf("%#v:\ngot  %s, %v\nwant %s, %v", c, got, gotErr, want, wantErr)
		}
		if gotErr == nil {
			valid++
		}
	}
	if valid < len(cmds)/2 {
		t.Fatalf("only %d of %d commands valid: the table tests too little", valid, len(cmds))
	}
	for _, s := range hardStrings {
		for _, code := range []int{0, 1, -1, math.MaxInt32, math.MinInt, math.MaxInt} {
			a := Ack{MessageID: "m-" + s, Code: code, Message: s}
			got, gotErr := a.AppendJSON(nil)
			want, wantErr := refAppendJSON(nil, &a)
			if !sameErr(gotErr, wantErr) || !bytes.Equal(got, want) {
				t.Errorf("%#v:\ngot  %s, %v\nwant %s, %v", a, got, gotErr, want, wantErr)
			}
			h := Heartbeat{DeviceID: s, Time: "2026-11-22T10:00:00Z", Firmware: s, Persons: code}
			got, gotErr = h.AppendJSON(nil)
			want, wantErr = refAppendJSON(nil, &h)
			if !sameErr(gotErr, wantErr) || !bytes.Equal(got, want) {
				t.Errorf("%#v:\ngot  %s, %v\nwant %s, %v", h, got, gotErr, want, wantErr)
			}
		}
	}
}

// sameErr: both nil, or both errors with the same text.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error()
}

func FuzzEncodeCommandJSON(f *testing.F) {
	f.Add("EditPerson-951-1494527067538440192", uint8(0), "951", "李雷", "2026-01-01T00:00:00+08:00", "2027-01-01T00:00:00Z")
	f.Add("m-1", uint8(1), "p", "", "", "")
	f.Add("<&>", uint8(0), "\u2028", "\xff\x00\"\\", "", "2027-01-01T00:00:00Z")
	f.Add("m", uint8(2), "p", "n", "x", "y")
	f.Add("m", uint8(0x80), "1001", "ed8b5c1121eda4fa", "", "")
	ops := []Op{AddPerson, DeletePerson, ListPersons, "", "Unknown"}
	f.Fuzz(func(t *testing.T, id string, op uint8, pid, name, from, to string) {
		c := Command{MessageID: id, Op: ops[int(op)%len(ops)], Person: Person{ID: pid, Name: name, ValidFrom: from, ValidTo: to}}
		if op&0x80 != 0 {
			c.Person.Rev = name // a v2 person: valid when name is a rev's wire form
		}
		got, gotErr := c.AppendJSON(nil)
		want, wantErr := refAppendJSON(nil, &c)
		if !sameErr(gotErr, wantErr) || !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s, %v\nwant %s, %v", c, got, gotErr, want, wantErr)
		}
		// Validation aside, the bytes are json.Marshal's for any strings at all.
		c.Op = Op(name)
		want, _ = json.Marshal(&c)
		if got := appendCommandJSON(nil, &c); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", c, got, want)
		}
	})
}

func FuzzEncodeAckHeartbeatJSON(f *testing.F) {
	f.Add("m-1", 0, "")
	f.Add("b-1-3f2a9c", 17, "refused <by> facesim \u2029")
	f.Add("", -1, "\xff")
	f.Fuzz(func(t *testing.T, s string, n int, text string) {
		a := Ack{MessageID: s, Code: n, Message: text}
		got, gotErr := a.AppendJSON(nil)
		want, wantErr := refAppendJSON(nil, &a)
		if !sameErr(gotErr, wantErr) || !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s, %v\nwant %s, %v", a, got, gotErr, want, wantErr)
		}
		h := Heartbeat{DeviceID: s, Time: text, Firmware: text, Persons: n}
		want, _ = json.Marshal(&h)
		if got := appendHeartbeatJSON(nil, &h); !bytes.Equal(got, want) {
			t.Fatalf("%#v:\ngot  %s\nwant %s", h, got, want)
		}
	})
}

// The three parsers answer every input as the encoding/json reference does: the same
// value, or an error with the same text (the plain path only takes inputs encoding/json
// decodes without error, so its errors are the validation errors both share).
func FuzzParseJSONSameAsEncodingJSON(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkParsersAgree(t, b)
	})
}

func checkParsersAgree(t *testing.T, b []byte) {
	t.Helper()
	c, err := ParseCommandJSON(b)
	rc, rerr := refParseCommandJSON(b)
	if !c.Equal(&rc) || !sameErr(err, rerr) {
		t.Fatalf("%q: command\ngot  %#v, %v\nwant %#v, %v", b, c, err, rc, rerr)
	}
	a, err := ParseAckJSON(b)
	ra, rerr := refParseAckJSON(b)
	if !reflect.DeepEqual(a, ra) || !sameErr(err, rerr) {
		t.Fatalf("%q: ack\ngot  %#v, %v\nwant %#v, %v", b, a, err, ra, rerr)
	}
	h, err := ParseHeartbeatJSON(b)
	rh, rerr := refParseHeartbeatJSON(b)
	if h != rh || !sameErr(err, rerr) {
		t.Fatalf("%q: heartbeat\ngot  %#v, %v\nwant %#v, %v", b, h, err, rh, rerr)
	}
}

// Every fixture, and each of its prefixes (cut messages), gets the reference's answer.
func TestParseJSONSameAsEncodingJSON(t *testing.T) {
	for _, s := range seeds(t) {
		step := 1 + len(s)/200 // every prefix of the small fixtures, some of the huge ones
		for i := 0; i < len(s); i += step {
			checkParsersAgree(t, s[:i])
		}
		checkParsersAgree(t, s)
	}
}

// What the agent and the terminals write takes the plain path; the fixtures that must not
// (escapes, other key spellings, unknown fields, null, odd numbers) do not.
func TestPlainPathTakesTheWireShape(t *testing.T) {
	c := Command{MessageID: "m-1", Op: AddPerson, Person: Person{ID: "951", Name: "李雷", ValidTo: "2027-01-01T00:00:00Z"}}
	b, _ := c.AppendJSON(nil)
	if got, ok := parsePlainCommand(b); !ok || !got.Equal(&c) {
		t.Errorf("command %s: plain %v %+v", b, ok, got)
	}
	a := Ack{MessageID: "m-1", Code: 17, Message: "refused"}
	b, _ = a.AppendJSON(nil)
	if got, hasCode, ok := parsePlainAck(b); !ok || !hasCode || !reflect.DeepEqual(got, a) {
		t.Errorf("ack %s: plain %v %v %+v", b, ok, hasCode, got)
	}
	h := Heartbeat{DeviceID: "2042253", Time: "2026-11-22T10:00:00Z", Firmware: "v3", Persons: 123}
	b, _ = h.AppendJSON(nil)
	if got, ok := parsePlainHeartbeat(b); !ok || got != h {
		t.Errorf("heartbeat %s: plain %v %+v", b, ok, got)
	}
	for _, file := range []string{"ack-escapes.json", "ack-key-case.json", "ack-unknown-field.json",
		"ack-code-null.json", "ack-code-exponent.json", "ack-code-fraction.json", "ack-code-overflow.json",
		"ack-code-leading-zero.json", "ack-invalid-utf8.json"} {
		if _, _, ok := parsePlainAck(readTestdata(t, file)); ok {
			t.Errorf("%s took the plain path", file)
		}
	}
	for _, file := range []string{"ack-spaces.json", "ack-duplicate-keys.json", "ack-code-minus-zero.json"} {
		if _, _, ok := parsePlainAck(readTestdata(t, file)); !ok {
			t.Errorf("%s did not take the plain path", file)
		}
	}
}

// One allocation per decoded message (the strings share one copy of the payload), none
// per encoded one.
func TestJSONCodecAllocations(t *testing.T) {
	a := Ack{MessageID: "EditPerson-951-1494527067538440192", Code: 0, Message: "ok"}
	b, _ := a.AppendJSON(nil)
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { _, _ = a.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("Ack.AppendJSON: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = benchCommand.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("Command.AppendJSON: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseAckJSON(b) }); n != 1 {
		t.Errorf("ParseAckJSON: %v allocations, want 1", n)
	}
}

// TestAppendJSONStringMatchesEncodingJSON: every byte value, invalid UTF-8 and the two
// line separators are quoted as encoding/json quotes them.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	var all []byte
	for b := range 256 {
		all = append(all, byte(b))
	}
	for _, s := range []string{"", "plain", string(all), "\u2028\u2029", "a\xffb", "\xed\xa0\x80", "😀<>&"} {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s, encoding/json %s", s, got, want)
		}
	}
}
