package sim

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// commandSeeds are testdata/commands.jsonl's lines: commands as the link writes them,
// with optional fields, escapes and non-ASCII text, and shapes the plain reader must leave
// to encoding/json (spacing, order, extra fields, trailing bytes, invalid values).
func commandSeeds(t testing.TB) [][]byte {
	data, err := os.ReadFile("testdata/commands.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(data), []byte("\n"))
}

// parseCommand answers what face.ParseCommandJSON answers: the same command, or an error
// when it errs. A difference would make the simulated terminals accept what real ones
// (and the agent's tests) would not, or the reverse.
func FuzzParseCommand(f *testing.F) {
	for _, s := range commandSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotErr := parseCommand(b)
		want, wantErr := face.ParseCommandJSON(b)
		if (gotErr == nil) != (wantErr == nil) || got != want {
			t.Fatalf("%q:\nparseCommand      %+v, %v\nParseCommandJSON %+v, %v", b, got, gotErr, want, wantErr)
		}
	})
}

// The link's own encoding takes the plain path; the seeds that must not, do not.
func TestParsePlainCommandTakesTheLinksShape(t *testing.T) {
	cmds := []face.Command{
		{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "p1"}},
		{MessageID: "m-2", Op: face.AddPerson, Person: face.Person{ID: "p2", Name: "Zoë Müller", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z"}},
		{MessageID: "m-3", Op: face.DeletePerson, Person: face.Person{ID: "p3", ValidFrom: "2026-01-01T00:00:00Z"}},
	}
	for _, c := range cmds {
		b, err := c.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parsePlainCommand(b)
		if !ok || got != c {
			t.Errorf("%s: plain path %v, %+v", b, ok, got)
		}
	}
	for i, s := range commandSeeds(t) {
		_, ok := parsePlainCommand(s)
		if plain := i != 3 && i != 5 && i != 6 && i != 9 && i != 11; ok != plain {
			t.Errorf("seed %d %s: plain path %v, want %v", i, s, ok, plain)
		}
		got, err := parseCommand(s)
		want, wantErr := face.ParseCommandJSON(s)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("seed %d %s: %+v, %v; ParseCommandJSON %+v, %v", i, s, got, err, want, wantErr)
		}
		var fe *face.Error
		if err != nil && !errors.As(err, &fe) {
			t.Errorf("seed %d: error %v is not a *face.Error", i, err)
		}
	}
}

// BenchmarkParseCommand: a command as the link writes it, read by the terminals' plain
// path and by face.ParseCommandJSON (encoding/json), in the same run.
func BenchmarkParseCommand(b *testing.B) {
	c := face.Command{MessageID: "b-12345-3f2a9c", Op: face.AddPerson, Person: face.Person{ID: "12345"}}
	msg, err := c.AppendJSON(nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		parse func([]byte) (face.Command, error)
	}{{"plain", parseCommand}, {"encoding-json", face.ParseCommandJSON}} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.parse(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The terminals' ack encoder writes json.Marshal's bytes, plain strings or not, and
// refuses what AppendJSON refuses.
func TestAppendAckSameAsMarshal(t *testing.T) {
	acks := []face.Ack{
		{MessageID: "m-1", Code: 0},
		{MessageID: "b-12345-3f2a9c", Code: 17, Message: "refused by facesim"},
		{MessageID: "m-2", Code: -3, Message: "a <b> & \"c\"\n"},
		{MessageID: "m-3", Message: "Zoë"},
		{MessageID: "", Code: 0},                    // invalid: no message id
		{MessageID: "m-4", Message: "bad\xffutf-8"}, // escaped by encoding/json
	}
	for _, a := range acks {
		got, gotErr := appendAck([]byte("x"), &a)
		want, wantErr := a.AppendJSON([]byte("x"))
		if (gotErr == nil) != (wantErr == nil) || (gotErr == nil && !bytes.Equal(got, want)) {
			t.Errorf("%+v: appendAck %q, %v; AppendJSON %q, %v", a, got, gotErr, want, wantErr)
		}
	}
}

// FuzzAppendAck: appendAck and Ack.AppendJSON write the same bytes and refuse the same acks.
func FuzzAppendAck(f *testing.F) {
	f.Add("m-1", 0, "")
	f.Add("b-12345-3f2a9c", 17, "refused by facesim")
	f.Add("m-2", -3, "a <b> & \"c\"\n")
	f.Fuzz(func(t *testing.T, id string, code int, msg string) {
		a := face.Ack{MessageID: id, Code: code, Message: msg}
		got, gotErr := appendAck(nil, &a)
		want, wantErr := a.AppendJSON(nil)
		if (gotErr == nil) != (wantErr == nil) || (gotErr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("%+v: appendAck %q, %v; AppendJSON %q, %v", a, got, gotErr, want, wantErr)
		}
	})
}
