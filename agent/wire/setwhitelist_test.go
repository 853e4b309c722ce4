package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

var whitelistLimits = Limits{KnownDevice: known, MaxWhitelist: DefaultMaxWhitelist}

func TestParseSetWhitelist(t *testing.T) {
	b, err := os.ReadFile("testdata/setwhitelist.json")
	if err != nil {
		t.Fatal(err)
	}
	got := Parse(b, whitelistLimits)
	if len(got.Rejects) != 0 || len(got.Tasks) != 1 {
		t.Fatalf("got %+v", got)
	}
	want := Task{TaskID: "t-9", DeviceID: "2042253", Op: SetWhitelist, Persons: []face.Person{
		{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00+08:00"},
		{ID: "952", Name: "Han Meimei"},
		{ID: "953"},
	}}
	if !reflect.DeepEqual(got.Tasks[0], want) {
		t.Errorf("task = %+v", got.Tasks[0])
	}
	// The same task through encoding/json (an escape keeps the plain decoder out).
	viaJSON := Parse(bytes.Replace(b, []byte("Li Lei"), []byte(`Li\u0020Lei`), 1), whitelistLimits)
	if len(viaJSON.Tasks) != 1 || !reflect.DeepEqual(viaJSON.Tasks[0], want) {
		t.Errorf("through encoding/json: %+v", viaJSON)
	}
	cmd := got.Command(0)
	if cmd.Op != SetWhitelist || cmd.MessageID != want.MessageID() || cmd.Person != (face.Person{}) {
		t.Errorf("command = %+v", cmd)
	}
	// The task written back is what the back office wrote: persons, no person.
	out, err := json.Marshal(got.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, compact.Bytes()) {
		t.Errorf("marshalled\n%s\nwant\n%s", out, compact.Bytes())
	}
	// AddPerson's form is unchanged: person, no persons.
	one := Task{TaskID: "t", DeviceID: "d", Op: face.DeletePerson, Person: face.Person{ID: "1"}}
	if out, _ := json.Marshal(one); string(out) != `{"taskId":"t","deviceId":"d","op":"DeletePerson","person":{"id":"1"}}` {
		t.Errorf("DeletePerson marshalled as %s", out)
	}
}

func TestParseSetWhitelistEmptyClears(t *testing.T) {
	for _, in := range []string{
		`{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","persons":[]}`,
		`{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","persons":[ ],"x":1}`, // encoding/json
	} {
		got := Parse([]byte(in), whitelistLimits)
		if len(got.Rejects) != 0 || len(got.Tasks) != 1 || got.Tasks[0].Persons == nil || len(got.Tasks[0].Persons) != 0 {
			t.Fatalf("%s: %+v", in, got)
		}
		out, _ := json.Marshal(got.Tasks[0])
		if !strings.Contains(string(out), `"persons":[]`) || strings.Contains(string(out), `"person"`) {
			t.Errorf("empty list marshalled as %s", out)
		}
	}
}

func TestParseSetWhitelistRefusals(t *testing.T) {
	task := func(persons string) string {
		return `{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","persons":[` + persons + `]}`
	}
	tests := []struct {
		name, in string
		lim      Limits
		reason   string
	}{
		{"not taken", task(`{"id":"1"}`), Limits{}, "SetWhitelist: not taken by this gateway"},
		{"over the bound", task(`{"id":"1"},{"id":"2"},{"id":"3"}`), Limits{MaxWhitelist: 2}, "whitelist too large: 3 persons (intake.max_whitelist 2)"},
		{"duplicate id", task(`{"id":"1"},{"id":"2"},{"id":"3"},{"id":"2","name":"b"},{"id":"1"}`), whitelistLimits,
			`invalid task: persons: duplicate person id "2" (persons[1] and persons[3])`},
		{"bad time", task(`{"id":"1"},{"id":"951","validFrom":"tomorrow"}`), whitelistLimits,
			`invalid task: persons[1] (id "951"): validFrom: "tomorrow" is not an RFC 3339 time`},
		{"missing id", task(`{"id":"1"},{"name":"x"}`), whitelistLimits, "invalid task: persons[1]: id: missing"},
		{"long id", task(`{"id":"` + strings.Repeat("9", 65) + `"}`), whitelistLimits, "invalid task: persons[0]: id: longer than 64 bytes"},
		{"long name", task(`{"id":"7","name":"` + strings.Repeat("n", 513) + `"}`), whitelistLimits,
			`invalid task: persons[0] (id "7"): name: longer than 512 bytes`},
		{"reversed validity", task(`{"id":"7","validFrom":"2027-01-01T00:00:00Z","validTo":"2026-01-01T00:00:00Z"}`), whitelistLimits,
			`invalid task: persons[0] (id "7"): validTo: 2026-01-01T00:00:00Z is before validFrom 2027-01-01T00:00:00Z`},
		{"no persons", `{"taskId":"t","deviceId":"2042253","op":"SetWhitelist"}`, whitelistLimits,
			`invalid task: persons: missing (an empty whitelist is "persons":[])`},
		{"null persons", `{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","persons":null}`, whitelistLimits,
			`invalid task: persons: missing (an empty whitelist is "persons":[])`},
		{"person instead", `{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","person":{"id":"1"},"persons":[]}`, whitelistLimits,
			"invalid task: person: SetWhitelist takes the list in persons, not a person"},
		{"persons on AddPerson", `{"taskId":"t","deviceId":"2042253","op":"AddPerson","person":{"id":"1"},"persons":[]}`, whitelistLimits,
			"invalid task: persons: only SetWhitelist carries persons (AddPerson takes one person)"},
		{"not an array", `{"taskId":"t","deviceId":"2042253","op":"SetWhitelist","persons":{"id":"1"}}`, whitelistLimits,
			"invalid task: persons: want an array, got JSON object"},
		{"unknown device", `{"taskId":"t","deviceId":"nope","op":"SetWhitelist","persons":[]}`, whitelistLimits, `unknown device "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Parse([]byte(tt.in), tt.lim)
			if len(got.Tasks) != 0 || len(got.Rejects) != 1 {
				t.Fatalf("got %+v", got)
			}
			if r := got.Rejects[0]; r.Reason != tt.reason || string(r.Payload) != tt.in {
				t.Errorf("reason %q\nwant   %q\npayload %s", r.Reason, tt.reason, r.Payload)
			}
		})
	}
}

// In a batch a refused SetWhitelist is refused alone, with its index, as any task.
func TestParseSetWhitelistInBatch(t *testing.T) {
	in := `[{"taskId":"a","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"1"},{"id":"1"}]},` +
		`{"taskId":"b","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"1"}]},` +
		`{"taskId":"c","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}}]`
	got := Parse([]byte(in), whitelistLimits)
	if len(got.Tasks) != 2 || got.Tasks[0].TaskID != "b" || got.Tasks[1].TaskID != "c" || len(got.Rejects) != 1 {
		t.Fatalf("got %+v", got)
	}
	if want := `task 0: invalid task: persons: duplicate person id "1" (persons[0] and persons[1])`; got.Rejects[0].Reason != want {
		t.Errorf("reason %q, want %q", got.Rejects[0].Reason, want)
	}
}

func TestSetWhitelistMessageID(t *testing.T) {
	task := Task{TaskID: "t-9", DeviceID: "2042253", Op: SetWhitelist, Persons: []face.Person{{ID: "951", Name: "Li Lei"}, {ID: "952"}}}
	id := task.MessageID()
	// Pinned, as AddPerson's: a redelivered SetWhitelist must be recognised after an upgrade.
	if id != "SetWhitelist-5753410248832703177" {
		t.Errorf("MessageID changed: %s", id)
	}
	clone := func(t Task) Task { t.Persons = append([]face.Person(nil), t.Persons...); return t }
	for _, change := range []func(*Task){
		func(t *Task) { t.TaskID = "t-10" },
		func(t *Task) { t.DeviceID = "2042254" },
		func(t *Task) { t.Persons[1].ValidTo = "2027-01-01T00:00:00Z" },
		func(t *Task) { t.Persons = t.Persons[:1] },
		func(t *Task) { t.Persons = []face.Person{} },
		func(t *Task) { t.Persons[0], t.Persons[1] = t.Persons[1], t.Persons[0] },
		func(t *Task) { t.Persons[0].Name, t.Persons[1].ID = "Li Le", "i952" }, // a byte moved between fields
		func(t *Task) { t.Persons = append(t.Persons, face.Person{}) },
	} {
		other := clone(task)
		change(&other)
		if other.MessageID() == id {
			t.Errorf("different tasks share MessageID %s: %+v", id, other)
		}
	}
	// Long fields go through the hash in pieces: still stable, and sensitive to each byte.
	long := Task{TaskID: "t", DeviceID: "d", Op: SetWhitelist, Persons: []face.Person{{ID: "1", Name: strings.Repeat("n", 2000)}}}
	longer := clone(long)
	longer.Persons[0].Name = strings.Repeat("n", 1999) + "m"
	if again := clone(long); long.MessageID() != again.MessageID() || long.MessageID() == longer.MessageID() {
		t.Error("MessageID of long fields is unstable or blind to the last byte")
	}
	if len(id) > face.MaxIDLen {
		t.Errorf("MessageID of %d bytes", len(id))
	}
}

// messageIDSetWhitelistPlain is messageIDSetWhitelist written plainly (each length
// prefix and field written to the hash as it comes): the buffered one must hash the same
// bytes.
func messageIDSetWhitelistPlain(t *Task) string {
	h := sha256.New()
	field := func(f string) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f))))
		h.Write([]byte(f))
	}
	field(t.TaskID)
	field(t.DeviceID)
	field(string(t.Op))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(t.Persons))))
	for _, p := range t.Persons {
		field(p.ID)
		field(p.Name)
		field(p.ValidFrom)
		field(p.ValidTo)
	}
	return "SetWhitelist-" + strconv.FormatUint(binary.BigEndian.Uint64(h.Sum(nil))>>1, 10)
}

func FuzzSetWhitelistMessageID(f *testing.F) {
	f.Add("t-9", "2042253", "951", "Li Lei", "", 2, 0)
	f.Add(strings.Repeat("t", 1019), "d", "", strings.Repeat("n", 1021), "2026-01-01T00:00:00Z", 3, 1)
	f.Fuzz(func(t *testing.T, task, dev, id, name, from string, n, grow int) {
		if n < 0 || n > 50 || grow < 0 || grow > 3 {
			t.Skip()
		}
		tk := Task{TaskID: task, DeviceID: dev, Op: SetWhitelist}
		for i := range n {
			// Fields of growing length cross the buffer's edge at every offset.
			tk.Persons = append(tk.Persons, face.Person{ID: id + strings.Repeat("i", i*grow), Name: name, ValidFrom: from, ValidTo: strings.Repeat("v", i*grow*7)})
		}
		if got, want := tk.MessageID(), messageIDSetWhitelistPlain(&tk); got != want {
			t.Fatalf("%+v: %s, plainly %s", tk, got, want)
		}
	})
}

// whitelistMessage is a SetWhitelist of n persons with the fields a site's access list
// has: a numeric staff id, a name, and a validity period with a zone offset.
func whitelistMessage(n int) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"taskId":"wl-2026-11-27-0001","deviceId":"2042253","op":"SetWhitelist","persons":[`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"id":"%d","name":"Person %06d","validFrom":"2026-01-01T00:00:00+08:00","validTo":"2027-01-01T00:00:00+08:00"}`, 1000000+i, i)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// TestWhitelistMessageSize pins the size of a SetWhitelist of 10,000 persons, the figure
// intake.max_message_size (and broker.max_packet_size for the embedded broker) must hold
// (configs/agent.toml).
func TestWhitelistMessageSize(t *testing.T) {
	b := whitelistMessage(10000)
	if len(b) != 1180084 {
		t.Errorf("10,000 persons take %d bytes", len(b))
	}
	got := Parse(b, whitelistLimits)
	if len(got.Tasks) != 1 || len(got.Tasks[0].Persons) != 10000 {
		t.Fatalf("%d tasks, %+v", len(got.Tasks), got.Rejects)
	}
}

func BenchmarkParseSetWhitelist(b *testing.B) {
	in := whitelistMessage(10000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if got := Parse(in, whitelistLimits); len(got.Tasks) != 1 {
			b.Fatalf("%+v", got.Rejects)
		}
	}
}

// An AddPerson's command carries the agent's rev of the record, never the rev the back
// office sent; a DeletePerson's carries none; the message id does not depend on it.
func TestCommandCarriesTheAgentsRev(t *testing.T) {
	msg := []byte(`[{"taskId":"t1","deviceId":"d1","op":"AddPerson","person":{"id":"951","name":"Li Lei","validTo":"2027-01-01T00:00:00Z","rev":"ffffffffffffffff"}},` +
		`{"taskId":"t2","deviceId":"d1","op":"DeletePerson","person":{"id":"952","rev":"0123456789abcdef"}},` +
		`{"taskId":"t3","deviceId":"d1","op":"AddPerson","person":{"id":"951","name":"Li Lei","validTo":"2027-01-01T00:00:00Z"}}]`)
	b := Parse(msg, Limits{})
	if len(b.Tasks) != 3 || len(b.Rejects) != 0 {
		t.Fatalf("parsed %+v", b)
	}
	want := face.RecordRev("951", "Li Lei", "", "2027-01-01T00:00:00Z", "").String()
	if c := b.Command(0); c.Person.Rev != want {
		t.Errorf("AddPerson with an upstream rev: command rev %q, want %q", c.Person.Rev, want)
	}
	if c := b.Tasks[0].Command(); c.Person.Rev != want {
		t.Errorf("Task.Command: rev %q, want %q", c.Person.Rev, want)
	}
	if c := b.Command(1); c.Person.Rev != "" {
		t.Errorf("DeletePerson: command rev %q, want none", c.Person.Rev)
	}
	if c := b.Command(2); c.Person.Rev != want {
		t.Errorf("AddPerson without a rev: command rev %q, want %q", c.Person.Rev, want)
	}
	plain := Task{TaskID: "t1", DeviceID: "d1", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Li Lei", ValidTo: "2027-01-01T00:00:00Z"}}
	if b.Command(0).MessageID != plain.MessageID() {
		t.Errorf("the upstream rev changed the message id: %s, want %s", b.Command(0).MessageID, plain.MessageID())
	}
}
