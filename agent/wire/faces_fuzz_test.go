package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// FuzzParseFaces: tasks whose persons carry faces. No input panics; every accepted face
// belongs to a person of its task, once, in order, and its data hashes to its sha256;
// where the plain decoder takes a message, encoding/json decodes the same tasks and
// faces; and face data written with escapes ("\/", "\u0041") decodes as without them.
func FuzzParseFaces(f *testing.F) {
	_, sum, b64 := testFace(7, 40)
	f.Add(addWithFace(`{"sha256":"`+sum+`","kind":"template","size":40,"data":"`+b64+`"}`), []byte("x"), uint8(3))
	f.Add([]byte(`{"taskId":"w","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"a","face":{"sha256":"`+sum+`"}},{"id":"b","face":{"sha256":"`+sum+`","data":"`+b64+`"}}]}`), []byte{0, 1, 2}, uint8(1))
	f.Add([]byte(`{"taskId":"a","deviceId":"2042253","op":"AddPerson","person":{"id":"1","face":{"sha256":"`+sum+`"}},"person":{"face":{"kind":"photo"}}}`), []byte{}, uint8(0))
	f.Add([]byte(`{"taskId":"a","deviceId":"2042253","op":"AddPerson","person":{"id":"1","FACE":{"sha256":"`+sum+`","data":"QQ=="}}}`), []byte("/?>"), uint8(255))
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1","face":{"data":7}}},{"taskId":"b","persons":[{"face":null}]}]`), []byte("\xff\xfe"), uint8(2))
	f.Fuzz(func(t *testing.T, msg, data []byte, escape uint8) {
		lim := Limits{MaxBatch: 10, KnownDevice: known, MaxWhitelist: 5}
		got := Parse(msg, lim)
		for _, task := range got.Tasks {
			n := 0
			switch task.Op {
			case face.AddPerson:
				n = 1
			case SetWhitelist:
				n = len(task.Persons)
			}
			last := -1
			for _, pf := range task.Faces {
				if pf.Person <= last || pf.Person >= n {
					t.Fatalf("face of person %d in a %s task of %d persons (after %d)", pf.Person, task.Op, n, last)
				}
				last = pf.Person
				if pf.Data != nil {
					s := sha256.Sum256(pf.Data)
					if hex.EncodeToString(s[:]) != pf.SHA256 || len(pf.Data) == 0 {
						t.Fatalf("accepted face data that does not hash to %s", pf.SHA256)
					}
				}
			}
		}
		if tasks, ok := parsePlainTasks(msg); ok {
			var want []Task
			var err error
			if t0 := bytes.TrimSpace(msg); len(t0) > 0 && t0[0] == '{' {
				var one Task
				err = json.Unmarshal(msg, &one)
				want = []Task{one}
			} else {
				err = json.Unmarshal(msg, &want)
			}
			if err != nil {
				t.Fatalf("plain decoder took %q, encoding/json refuses it: %v", msg, err)
			}
			if !reflect.DeepEqual(tasks, want) {
				t.Fatalf("%q: plain %+v, encoding/json %+v", msg, tasks, want)
			}
		}

		// The same face data, plain and with escapes.
		if len(data) == 0 {
			return
		}
		s := sha256.Sum256(data)
		enc := base64.StdEncoding.EncodeToString(data)
		var esc bytes.Buffer
		for i := 0; i < len(enc); i++ {
			switch c := enc[i]; {
			case c == '/' && escape&1 != 0:
				esc.WriteString(`\/`)
			case escape&2 != 0 && i%int(escape|1) == 0:
				fmt.Fprintf(&esc, `\u%04x`, c)
			default:
				esc.WriteByte(c)
			}
		}
		if escape&4 != 0 {
			esc.WriteString(`\n`) // skipped, as base64 skips line breaks
		}
		var faces [2][]PersonFace
		for i, d := range []string{enc, esc.String()} {
			b := Parse(addWithFace(`{"sha256":"`+hex.EncodeToString(s[:])+`","data":"`+d+`"}`), lim)
			if len(b.Tasks) != 1 {
				t.Fatalf("%q (escaped %v): %+v", d, i == 1, b.Rejects)
			}
			faces[i] = b.Tasks[0].Faces
		}
		if !reflect.DeepEqual(faces[0][0].Data, faces[1][0].Data) || !bytes.Equal(faces[0][0].Data, data) {
			t.Fatalf("escaped data decodes to %x, plain to %x, want %x", faces[1][0].Data, faces[0][0].Data, data)
		}
	})
}
