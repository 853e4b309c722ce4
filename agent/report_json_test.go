package agent

import (
	"encoding/json"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
)

// FuzzResultJSON: appendResultJSON writes what encoding/json writes for intake.Result,
// for any strings and numbers.
func FuzzResultJSON(f *testing.F) {
	f.Add("t-1", "2042253", "AddPerson-951-1494527067538440192", "succeeded", 1, "", int64(12))
	f.Add("t<&>", "d\"\\", "m\n\t\b\f\r\x01\x1f", "failed", -3, "refused: \xff \u2028 \u2029 é 漢", int64(-1))
	f.Fuzz(func(t *testing.T, task, dev, msg, status string, tries int, errText string, ms int64) {
		r := intake.Result{TaskID: task, DeviceID: dev, MessageID: msg, Status: intake.Status(status), Tries: tries, Error: errText, DurationMs: ms}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendResultJSON(nil, &r); string(got) != string(want) {
			t.Fatalf("%+v: got %s, encoding/json %s", r, got, want)
		}
	})
}

// Every outbox status maps to the upstream status and reads back with ParseResult.
func TestResultJSONStatuses(t *testing.T) {
	for st, want := range map[outbox.Status]intake.Status{
		outbox.Succeeded: intake.Succeeded, outbox.Superseded: intake.Superseded,
		outbox.Expired: intake.Failed, outbox.Failed: intake.Failed,
	} {
		r := outbox.Result{TaskID: "t-1", DeviceID: "d", MessageID: "m", Status: st, Tries: 2}
		got, err := intake.ParseResult(resultJSON(r))
		if err != nil || got.Status != want || got.TaskID != "t-1" || got.Tries != 2 {
			t.Errorf("status %v: %+v, %v", st, got, err)
		}
		if st == outbox.Expired && got.Error == "" {
			t.Errorf("expired result without an error text")
		}
	}
}

// BenchmarkResultJSON: the reporter's encoding of one result, against encoding/json on the
// same value.
func BenchmarkResultJSON(b *testing.B) {
	r := outbox.Result{TaskID: "b-123456", DeviceID: "2042253", MessageID: "AddPerson-951-1494527067538440192", Status: outbox.Succeeded, Tries: 1}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out := upstreamResult(r)
			if _, err := json.Marshal(out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appender", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resultJSON(r)
		}
	})
}
