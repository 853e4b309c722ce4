package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// FuzzParse: no input panics; every part of a message is either accepted or rejected
// with a reason; accepted tasks validate, re-encode and parse back equal; every
// deadletter is valid JSON within its bound.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}},1,null]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := Parse(data, Limits{MaxBatch: 50, MaxMessageSize: 64 << 10, KnownDevice: known, MaxWhitelist: 5})
		for _, task := range got.Tasks {
			if err := task.Validate(); err != nil {
				t.Fatalf("accepted an invalid task %+v: %v", task, err)
			}
			b, err := json.Marshal(task)
			if err != nil {
				t.Fatal(err)
			}
			again := Parse(b, Limits{KnownDevice: known, MaxWhitelist: 5})
			if len(again.Tasks) != 1 || !reflect.DeepEqual(again.Tasks[0], task) {
				t.Fatalf("task does not round-trip: %+v -> %s -> %+v", task, b, again)
			}
			if task.Op == SetWhitelist {
				if len(task.Persons) > 5 {
					t.Fatalf("accepted a list of %d persons, bound 5", len(task.Persons))
				}
				// Each person would make a valid terminal command.
				for _, p := range task.Persons {
					cmd := face.Command{MessageID: "m", Op: face.AddPerson, Person: p}
					if err := cmd.Validate(); err != nil {
						t.Fatalf("accepted a person the terminal protocol refuses: %+v: %v", p, err)
					}
				}
			} else if cmd := task.Command(); cmd.Validate() != nil {
				t.Fatalf("command for an accepted task is invalid: %+v", cmd)
			}
		}
		for _, r := range got.Rejects {
			if r.Reason == "" {
				t.Fatal("reject without a reason")
			}
			dl, err := json.Marshal(r)
			if err != nil || !json.Valid(dl) {
				t.Fatalf("deadletter is not JSON: %s %v", dl, err)
			}
			if len(r.Payload) > 8*MaxDeadLetterPayload && len(r.Payload) > len(data)+2 {
				t.Fatalf("deadletter payload of %d bytes", len(r.Payload))
			}
		}
		if len(got.Tasks)+len(got.Rejects) == 0 {
			// Only an empty batch may yield nothing.
			var arr []json.RawMessage
			if json.Unmarshal(data, &arr) != nil || len(arr) != 0 {
				t.Fatalf("input %q produced neither tasks nor rejects", data)
			}
		}
	})
}

// FuzzParseCleanSameAsElementwise: the one-decode path Parse takes for a message with
// nothing to refuse (parseClean) accepts exactly the messages the element-wise path
// accepts whole, with the same tasks in the same order and each task's MessageID; and
// Batch.Command gives what Task.Command gives. For a message with something to refuse,
// the element-wise path given parseClean's decode of the whole message accepts and
// refuses exactly what it does decoding each element itself.
func FuzzParseCleanSameAsElementwise(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"1"},{"id":"2"},{"id":"3"},{"id":"4"}]},{"taskId":"b","deviceId":"2042253","op":"SetWhitelist","persons":[]}]`))
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}},null]`))
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}},{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}}]`))
	f.Add([]byte(`{"TASKID":"a","deviceId":"2042253","op":"AddPerson","person":{"id":"1","name":"x\u00e9\ud800"},"taskId":"b"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxBatch: 3, KnownDevice: known, MaxWhitelist: 3}
		trimmed := bytes.TrimSpace(data)
		clean, ok := parseClean(trimmed, lim)
		whole := parseElementwise(data, trimmed, lim, nil)
		if wantOK := len(whole.Rejects) == 0; ok != wantOK {
			t.Fatalf("parseClean ok=%v, element-wise rejects %d (%+v) for %q", ok, len(whole.Rejects), whole.Rejects, data)
		}
		if !ok {
			reused := parseElementwise(data, trimmed, lim, clean.Tasks)
			if !reflect.DeepEqual(reused, whole) {
				t.Fatalf("with the whole decode %d tasks, rejects %+v; decoding each element %d tasks, rejects %+v, for %q",
					len(reused.Tasks), reused.Rejects, len(whole.Tasks), whole.Rejects, data)
			}
			return
		}
		if len(clean.Tasks) != len(whole.Tasks) || len(clean.ids) != len(clean.Tasks) {
			t.Fatalf("%d tasks (%d ids) against %d for %q", len(clean.Tasks), len(clean.ids), len(whole.Tasks), data)
		}
		for i := range clean.Tasks {
			if !reflect.DeepEqual(clean.Tasks[i], whole.Tasks[i]) || clean.ids[i] != whole.ids[i] {
				t.Fatalf("task %d: %+v %s against %+v %s", i, clean.Tasks[i], clean.ids[i], whole.Tasks[i], whole.ids[i])
			}
			if bc, tc := clean.Command(i), clean.Tasks[i].Command(); !bc.Equal(&tc) {
				t.Fatalf("Batch.Command(%d) = %+v, Task.Command = %+v", i, clean.Command(i), clean.Tasks[i].Command())
			}
		}
	})
}

// FuzzParseResultPlain: where the plain decoder takes a result message, encoding/json
// takes it too and decodes the same Result.
func FuzzParseResultPlain(f *testing.F) {
	f.Add([]byte(`{"taskId":"t-1","deviceId":"2042253","messageId":"AddPerson-951-1","status":"succeeded","tries":1,"error":"","durationMs":12}`))
	f.Add([]byte(` { "taskId" : "t" , "tries" : -0 , "durationMs" : 9223372036854775807 } `))
	f.Add([]byte(`{"taskId":"t","TaskId":"u","tries":1.5,"error":"a\"b","x":null}`))
	f.Add([]byte(`{"status":"failed","tries":01,"durationMs":1e3}`))
	f.Add([]byte("{\"error\":\"\xff\",\"deviceId\":\"\u00e9\"}"))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"taskId":"t","status":"succeeded","durationMs":3,"added":1,"deleted":0,"unchanged":-2,"added":4}`))
	f.Add([]byte(`{"unchanged":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parseResultPlain(data)
		if !ok {
			return
		}
		var want Result
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("plain decoder took %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: plain %+v %+v, encoding/json %+v %+v", data, got, got.WhitelistCounts, want, want.WhitelistCounts)
		}
	})
}

// FuzzParsePlainTasks: where the plain decoder takes a task message, encoding/json takes
// it too and decodes the same tasks (a Task for an object, a []Task for an array).
func FuzzParsePlainTasks(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(` [ ] `))
	f.Add([]byte(`[{"taskId":"a","deviceId":"2042253","op":"DeletePerson","person":{"id":"1"}},null]`))
	f.Add([]byte(`[{"taskId":"a","person":{"id":"1","name":"é"},"person":{"name":"b"},"taskId":"c"},{}]`))
	f.Add([]byte(`{"taskId":"a","TaskId":"b","op":1,"person":null,"x":"\u00e9"}`))
	f.Add([]byte("{\"taskId\":\"\xff\"}"))
	f.Add([]byte(`[{},]`))
	f.Add([]byte(`{"taskId":"a"} {}`))
	f.Add([]byte(`{"op":"SetWhitelist","persons":[{"id":"1","name":"a"},{"id":"2"}],"persons":[{"id":"3"}]}`))
	f.Add([]byte(`[{"persons":[]},{"persons":[ {"id":"1","id":"2"} , {} ]},{"persons":null},{"persons":[,]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parsePlainTasks(data)
		if !ok {
			return
		}
		var want []Task
		var err error
		if t0 := bytes.TrimSpace(data); len(t0) > 0 && t0[0] == '{' {
			var one Task
			err = json.Unmarshal(data, &one)
			want = []Task{one}
		} else {
			err = json.Unmarshal(data, &want)
		}
		if err != nil {
			t.Fatalf("plain decoder took %q, encoding/json refuses it: %v", data, err)
		}
		if len(got) != len(want) || got == nil || want == nil {
			t.Fatalf("%q: plain %d tasks (nil %v), encoding/json %d (nil %v)", data, len(got), got == nil, len(want), want == nil)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%q: task %d: plain %+v, encoding/json %+v", data, i, got[i], want[i])
			}
		}
	})
}
