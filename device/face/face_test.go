package face

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseJSONFixtures(t *testing.T) {
	cases := []struct {
		file    string
		parse   func([]byte) error
		wantErr error  // nil: must parse
		field   string // the field the error must name
	}{
		{"command-add.json", parseCmd, nil, ""},
		{"command-delete.json", parseCmd, nil, ""},
		{"command-unknown-op.json", parseCmd, ErrInvalid, "op"},
		{"command-no-messageid.json", parseCmd, ErrInvalid, "messageId"},
		{"command-cut.json", parseCmd, ErrMalformed, ""},
		{"ack-ok.json", parseAck, nil, ""},
		{"ack-refused.json", parseAck, nil, ""},
		{"ack-no-code.json", parseAck, ErrInvalid, "code"},
		{"ack-wrong-type.json", parseAck, ErrMalformed, ""},
		{"heartbeat.json", parseHB, nil, ""},
		{"heartbeat-bad-time.json", parseHB, ErrInvalid, "time"},
		{"garbage.json", parseAck, ErrMalformed, ""},
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
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			var fe *Error
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("error %#v does not name field %q", err, c.field)
			}
		})
	}
}

func parseCmd(b []byte) error { _, err := ParseCommandJSON(b); return err }
func parseAck(b []byte) error { _, err := ParseAckJSON(b); return err }
func parseHB(b []byte) error  { _, err := ParseHeartbeatJSON(b); return err }

func TestCommandJSONKeepsFieldsAndTimesVerbatim(t *testing.T) {
	c, err := ParseCommandJSON(readTestdata(t, "command-add.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := Command{MessageID: "EditPerson-951-1494527067538440192", Op: AddPerson,
		Person: Person{ID: "951", Name: "李雷", ValidFrom: "2026-01-01T00:00:00+08:00", ValidTo: "2027-01-01T00:00:00Z"}}
	if !c.Equal(&want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	out, err := c.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCommandJSON(out)
	if err != nil || !back.Equal(&want) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func TestMsgRoundTrip(t *testing.T) {
	c := Command{MessageID: "m-1", Op: DeletePerson, Person: Person{ID: "7"}}
	b, err := c.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseCommandMsg(b); err != nil || !got.Equal(&c) {
		t.Fatalf("command: %+v %v", got, err)
	}
	if _, err := ParseCommandMsg(append(b, 0xc0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	if _, err := ParseCommandMsg(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("cut message accepted: %v", err)
	}
	a := Ack{MessageID: "m-1", Code: 3, Message: "full"}
	b, _ = a.AppendMsg(nil)
	if got, err := ParseAckMsg(b); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("ack: %+v %v", got, err)
	}
	h := Heartbeat{DeviceID: "d", Time: "2026-11-22T10:00:00Z", Firmware: "v1", Persons: 4}
	b, _ = h.AppendMsg(nil)
	if got, err := ParseHeartbeatMsg(b); err != nil || got != h {
		t.Fatalf("heartbeat: %+v %v", got, err)
	}
	// An ack encoded without a messageId decodes but does not validate.
	b, _ = (&Ack{Code: 0}).MarshalMsg(nil)
	if _, err := ParseAckMsg(b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ack without messageId: %v", err)
	}
}

func TestValidateBounds(t *testing.T) {
	c := Command{MessageID: strings.Repeat("x", MaxIDLen+1), Op: AddPerson, Person: Person{ID: "1"}}
	if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "messageId") {
		t.Fatalf("long messageId: %v", err)
	}
	c = Command{MessageID: "m", Op: AddPerson}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "person.id: missing") {
		t.Fatalf("missing person id: %v", err)
	}
	if _, err := c.AppendJSON(nil); err == nil {
		t.Fatal("AppendJSON encoded an invalid command")
	}
}

// seeds returns every testdata file, the corpus of both fuzz targets.
func seeds(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	var out [][]byte
	for _, f := range files {
		out = append(out, readTestdata(t, filepath.Base(f)))
	}
	return out
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := ParseCommandJSON(b); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed command does not validate: %v", err)
			}
			out, err := c.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := ParseCommandJSON(out); err != nil || !back.Equal(&c) {
				t.Fatalf("re-encoding changed the command: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
		if _, err := ParseAckJSON(b); err != nil {
			checkErr(t, err)
		}
		if _, err := ParseHeartbeatJSON(b); err != nil {
			checkErr(t, err)
		}
	})
}

func FuzzParseMsg(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s) // not msgp: exercises the error paths
		if c, err := ParseCommandJSON(s); err == nil {
			b, _ := c.MarshalMsg(nil)
			f.Add(b)
		}
		if a, err := ParseAckJSON(s); err == nil {
			b, _ := a.MarshalMsg(nil)
			f.Add(b)
		}
		if h, err := ParseHeartbeatJSON(s); err == nil {
			b, _ := h.MarshalMsg(nil)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := ParseCommandMsg(b); err == nil {
			out, _ := c.AppendMsg(nil)
			if back, err := ParseCommandMsg(out); err != nil || !back.Equal(&c) {
				t.Fatalf("re-encoding changed the command: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
		if a, err := ParseAckMsg(b); err == nil {
			out, _ := a.AppendMsg(nil)
			back, err := ParseAckMsg(out)
			if len(a.Persons) == 0 {
				a.Persons = nil // an empty page and none are the same in msgp
			}
			if err != nil || !reflect.DeepEqual(back, a) {
				t.Fatalf("re-encoding changed the ack: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
		if h, err := ParseHeartbeatMsg(b); err == nil {
			out, _ := h.AppendMsg(nil)
			if back, err := ParseHeartbeatMsg(out); err != nil || back != h {
				t.Fatalf("re-encoding changed the heartbeat: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
	})
}

// checkErr insists that every decode error is an *Error classed as malformed or invalid.
func checkErr(t *testing.T, err error) {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrInvalid)) {
		t.Fatalf("unclassified error %T: %v", err, err)
	}
}
