package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// testFace returns n bytes of face data, its sha256 in hex and its base64.
func testFace(seed, n int) (data []byte, sum, b64 string) {
	data = make([]byte, n)
	for i := range data {
		data[i] = byte(seed + i*31 + i>>7)
	}
	s := sha256.Sum256(data)
	return data, hex.EncodeToString(s[:]), base64.StdEncoding.EncodeToString(data)
}

func addWithFace(faceJSON string) []byte {
	return []byte(`{"taskId":"t-f","deviceId":"2042253","op":"AddPerson","person":{"id":"951","name":"Li Lei","face":` + faceJSON + `}}`)
}

func TestParseFaceWithData(t *testing.T) {
	data, sum, b64 := testFace(1, 3000)
	msgs := map[string][]byte{
		"plain": addWithFace(`{"sha256":"` + sum + `","kind":"template","size":3000,"data":"` + b64 + `"}`),
		// An escaped slash and a key spelt otherwise take the encoding/json path.
		"escaped": addWithFace(`{"SHA256":"` + sum + `","kind":"template","size":3000,"data":"` + strings.ReplaceAll(b64, "/", `\/`) + `"}`),
	}
	var tasks []Task
	for name, msg := range msgs {
		got := Parse(msg, Limits{KnownDevice: known})
		if len(got.Rejects) != 0 || len(got.Tasks) != 1 {
			t.Fatalf("%s: %+v", name, got.Rejects)
		}
		tk := got.Tasks[0]
		if len(tk.Faces) != 1 {
			t.Fatalf("%s: faces %+v", name, tk.Faces)
		}
		f := tk.Faces[0]
		if f.Person != 0 || f.SHA256 != sum || f.Kind != FaceTemplate || f.Len() != 3000 || !bytes.Equal(f.Data, data) {
			t.Fatalf("%s: face %+v", name, f)
		}
		tasks = append(tasks, tk)
	}
	if !reflect.DeepEqual(tasks[0], tasks[1]) {
		t.Fatalf("the plain and encoding/json paths differ:\n%+v\n%+v", tasks[0], tasks[1])
	}
	// The face is part of the task's identity; the command to the terminal is the same
	// person record.
	plain := Parse(addWithFace(`{"sha256":"`+sum+`"}`), Limits{}).Tasks[0]
	none := Task{TaskID: "t-f", DeviceID: "2042253", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Li Lei"}}
	if plain.MessageID() == none.MessageID() {
		t.Fatal("a task with a face has the id of the same task without one")
	}
	if plain.MessageID() != tasks[0].MessageID() {
		t.Fatal("the id depends on whether the data came along")
	}
	// A task re-encoded with its face parses back the same.
	b, err := json.Marshal(tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	again := Parse(b, Limits{})
	if len(again.Tasks) != 1 || !reflect.DeepEqual(again.Tasks[0], tasks[0]) {
		t.Fatalf("no round trip: %s -> %+v", b, again)
	}
}

func TestParseFaceWithoutData(t *testing.T) {
	_, sum, _ := testFace(2, 10)
	got := Parse(addWithFace(`{"sha256":"`+sum+`","kind":"photo"}`), Limits{KnownDevice: known})
	if len(got.Rejects) != 0 || len(got.Tasks[0].Faces) != 1 {
		t.Fatalf("%+v", got)
	}
	if f := got.Tasks[0].Faces[0]; f.Data != nil || f.SHA256 != sum || f.Kind != FacePhoto {
		t.Fatalf("face %+v", f)
	}
}

func TestParseDeletePersonIgnoresFace(t *testing.T) {
	_, sum, b64 := testFace(3, 100)
	msg := `{"taskId":"t-d","deviceId":"2042253","op":"DeletePerson","person":{"id":"951","face":{"sha256":"` + sum + `","data":"` + b64 + `"}}}`
	for _, m := range []string{msg, strings.Replace(msg, `"op"`, `"OP"`, 1)} {
		got := Parse([]byte(m), Limits{KnownDevice: known})
		if len(got.Rejects) != 0 || got.Tasks[0].Faces != nil {
			t.Fatalf("%s: %+v", m, got)
		}
	}
	none := Task{TaskID: "t-d", DeviceID: "2042253", Op: face.DeletePerson, Person: face.Person{ID: "951"}}
	if Parse([]byte(msg), Limits{}).Tasks[0].MessageID() != none.MessageID() {
		t.Fatal("an ignored face changed the DeletePerson's id")
	}
}

// Each refusal names the person and the field, in a single task and in a SetWhitelist.
func TestParseFaceRefusals(t *testing.T) {
	data, sum, b64 := testFace(4, 900)
	other := sha256.Sum256([]byte("other"))
	otherHex := hex.EncodeToString(other[:])
	cases := []struct {
		name, face, want string
	}{
		{"no sha256", `{"data":"` + b64 + `"}`, "person.face.sha256: missing"},
		{"upper-case sha256", `{"sha256":"` + strings.ToUpper(sum) + `"}`, "person.face.sha256: \"" + strings.ToUpper(sum) + "\" is not 64 lower-case hex digits"},
		{"short sha256", `{"sha256":"abc"}`, `person.face.sha256: "abc" is not 64 lower-case hex digits`},
		{"unknown kind", `{"sha256":"` + sum + `","kind":"hologram"}`, `person.face.kind: "hologram" is neither "template" nor "photo"`},
		{"hash mismatch", `{"sha256":"` + otherHex + `","data":"` + b64 + `"}`, "person.face.data: hashes to " + sum + ", not to sha256 " + otherHex},
		{"bad base64", `{"sha256":"` + sum + `","data":"` + b64[:len(b64)-1] + `!"}`, "person.face.data: not standard base64 (RFC 4648, padded): illegal base64 data at input byte"},
		{"unpadded base64", `{"sha256":"` + sum + `","data":"` + strings.TrimRight(base64.StdEncoding.EncodeToString(data[:899]), "=") + `"}`, "person.face.data: not standard base64"},
		{"data not a string", `{"sha256":"` + sum + `","data":5}`, "person.face.data: want a base64 string"},
		{"empty data", `{"sha256":"` + sum + `","data":""}`, "person.face.data: empty"},
		{"size differs", `{"sha256":"` + sum + `","size":901,"data":"` + b64 + `"}`, "person.face.size: 901, but data holds 900 bytes"},
		{"negative size", `{"sha256":"` + sum + `","size":-1}`, "person.face.size: -1 is negative"},
		{"size not a number", `{"sha256":"` + sum + `","size":"900"}`, "invalid task: person.face.size: want a number, got JSON string"},
	}
	for _, c := range cases {
		got := Parse(addWithFace(c.face), Limits{KnownDevice: known})
		if len(got.Tasks) != 0 || len(got.Rejects) != 1 || !strings.Contains(got.Rejects[0].Reason, c.want) {
			t.Errorf("%s: %+v, want a reject with %q", c.name, got, c.want)
		}
	}
	// In a SetWhitelist the reason names the person by index and id.
	wl := `{"taskId":"w","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"a"},{"id":"b","face":{"sha256":"` + sum + `","data":"` + b64 + `"}},{"id":"c","face":{"sha256":"` + otherHex + `","data":"` + b64 + `"}}]}`
	got := Parse([]byte(wl), whitelistLimits)
	want := `invalid task: persons[2] (id "c"): face.data: hashes to ` + sum
	if len(got.Rejects) != 1 || !strings.HasPrefix(got.Rejects[0].Reason, want) {
		t.Fatalf("SetWhitelist: %+v, want %q", got, want)
	}
	// Fixed, the list is taken with its face at its person's index.
	got = Parse([]byte(strings.Replace(wl, otherHex, sum, 1)), whitelistLimits)
	if len(got.Rejects) != 0 || len(got.Tasks[0].Faces) != 2 || got.Tasks[0].Faces[0].Person != 1 || got.Tasks[0].Faces[1].Person != 2 {
		t.Fatalf("SetWhitelist with faces: %+v", got)
	}
	// In a batch, only the element with the bad face is refused.
	batch := "[" + string(addWithFace(`{"sha256":"`+otherHex+`","data":"`+b64+`"}`)) + "," +
		strings.Replace(string(addWithFace(`{"sha256":"`+sum+`","data":"`+b64+`"}`)), "t-f", "t-g", 1) + "]"
	got = Parse([]byte(batch), Limits{KnownDevice: known})
	if len(got.Tasks) != 1 || got.Tasks[0].TaskID != "t-g" || len(got.Rejects) != 1 || !strings.HasPrefix(got.Rejects[0].Reason, "task 0: invalid task: person.face.data: hashes to") {
		t.Fatalf("batch: %+v", got)
	}
}

// BenchmarkParseFace: intake of one AddPerson carrying a face of 1 KiB or 100 KiB, on the
// plain path and on the encoding/json path (an escaped "/" in the base64). B/op against
// the face's size is the transient memory a face costs.
func BenchmarkParseFace(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 10} {
		_, sum, b64 := testFace(5, size)
		for _, path := range []string{"plain", "encoding-json"} {
			data := b64
			if path != "plain" {
				data = strings.ReplaceAll(b64, "/", `\/`)
			}
			msg := addWithFace(`{"sha256":"` + sum + `","kind":"template","data":"` + data + `"}`)
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, path), func(b *testing.B) {
				b.SetBytes(int64(len(msg)))
				b.ReportAllocs()
				for b.Loop() {
					got := Parse(msg, Limits{KnownDevice: known})
					if len(got.Tasks) != 1 || len(got.Tasks[0].Faces[0].Data) != size {
						b.Fatalf("%+v", got.Rejects)
					}
				}
			})
		}
		// A batch with a reject takes the element-wise path.
		msg := []byte("[" + string(addWithFace(`{"sha256":"`+sum+`","data":"`+b64+`"}`)) + `,{"taskId":"x"}]`)
		b.Run(fmt.Sprintf("%dKiB/batch-with-reject", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if got := Parse(msg, Limits{KnownDevice: known}); len(got.Tasks) != 1 || len(got.Rejects) != 1 {
					b.Fatalf("%+v", got.Rejects)
				}
			}
		})
	}
}

// An AddPerson's command carries the person's face ref and the rev of the record with the
// face: what the desired record holds, so a terminal that took it is judged in step. The
// face's size is the data's, or the size the task states without data.
func TestCommandCarriesFace(t *testing.T) {
	_, sum, b64 := testFace(3, 1024)
	for name, msg := range map[string][]byte{
		"with data":    addWithFace(`{"sha256":"` + sum + `","kind":"template","data":"` + b64 + `"}`),
		"without data": addWithFace(`{"sha256":"` + sum + `","kind":"template","size":1024}`),
	} {
		b := Parse(msg, Limits{})
		if len(b.Tasks) != 1 {
			t.Fatalf("%s: %+v", name, b.Rejects)
		}
		cmd := b.Command(0)
		want := face.FaceRef{SHA256: sum, Size: 1024, Kind: face.FaceTemplate}
		if cmd.Person.Face != want {
			t.Fatalf("%s: command's face %+v, want %+v", name, cmd.Person.Face, want)
		}
		if cmd.Person.Rev != face.RecordRev("951", "Li Lei", "", "", sum).String() {
			t.Fatalf("%s: rev %s is not the record's with its face", name, cmd.Person.Rev)
		}
		if err := cmd.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// A DeletePerson carries no face (its face is ignored) and no rev.
	del := Parse([]byte(`{"taskId":"t-d","deviceId":"2042253","op":"DeletePerson","person":{"id":"951","face":{"sha256":"`+sum+`"}}}`), Limits{})
	if c := del.Command(0); !c.Person.Face.IsZero() || c.Person.Rev != "" {
		t.Fatalf("DeletePerson command %+v", c)
	}
}
