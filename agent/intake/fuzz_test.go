package intake

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
		got := Parse(data, Limits{MaxBatch: 50, MaxMessageSize: 64 << 10, KnownDevice: known})
		for _, task := range got.Tasks {
			if err := task.Validate(); err != nil {
				t.Fatalf("accepted an invalid task %+v: %v", task, err)
			}
			b, err := json.Marshal(task)
			if err != nil {
				t.Fatal(err)
			}
			again := Parse(b, Limits{KnownDevice: known})
			if len(again.Tasks) != 1 || again.Tasks[0] != task {
				t.Fatalf("task does not round-trip: %+v -> %s -> %+v", task, b, again)
			}
			if cmd := task.Command(); cmd.Validate() != nil {
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
