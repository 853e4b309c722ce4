package report

import (
	"encoding/json"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// FuzzResultJSON: appendResultJSON writes what encoding/json writes for wire.Result,
// for any strings and numbers, with a SetWhitelist's counts (counts true) or without.
func FuzzResultJSON(f *testing.F) {
	f.Add("t-1", "2042253", "AddPerson-951-1494527067538440192", "succeeded", 1, "", int64(12), false, 0, 0, 0)
	f.Add("t<&>", "d\"\\", "m\n\t\b\f\r\x01\x1f", "failed", -3, "refused: \xff \u2028 \u2029 é 漢", int64(-1), false, 0, 0, 0)
	f.Add("t-2", "2042253", "SetWhitelist-1", "succeeded", 1, "", int64(40), true, 3, 1, 9996)
	f.Add("t-3", "d", "SetWhitelist-2", "failed", 0, "capacity", int64(0), true, 0, -1, 1<<30)
	f.Fuzz(func(t *testing.T, task, dev, msg, status string, tries int, errText string, ms int64, counts bool, added, deleted, unchanged int) {
		r := wire.Result{TaskID: task, DeviceID: dev, MessageID: msg, Status: wire.Status(status), Tries: tries, Error: errText, DurationMs: ms}
		if counts {
			r.WhitelistCounts = &wire.WhitelistCounts{Added: added, Deleted: deleted, Unchanged: unchanged}
		}
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
	for st, want := range map[outbox.Status]wire.Status{
		outbox.Succeeded: wire.Succeeded, outbox.Superseded: wire.Superseded,
		outbox.Expired: wire.Failed, outbox.Failed: wire.Failed,
	} {
		r := outbox.Result{TaskID: "t-1", DeviceID: "d", MessageID: "m", Status: st, Tries: 2}
		got, err := wire.ParseResult(resultJSON(r))
		if err != nil || got.Status != want || got.TaskID != "t-1" || got.Tries != 2 {
			t.Errorf("status %v: %+v, %v", st, got, err)
		}
		if st == outbox.Expired && got.Error == "" {
			t.Errorf("expired result without an error text")
		}
	}
}

// A round's results encoded into one buffer are each what encoding/json writes for it
// alone, also when an escaped one outgrows the buffer's estimate and the rest move on to
// a larger one.
func TestResultsJSONShareABuffer(t *testing.T) {
	results := []outbox.Result{
		{TaskID: "t-1", DeviceID: "d1", MessageID: "AddPerson-1-1", Status: outbox.Succeeded, Tries: 1},
		{TaskID: "t-2", DeviceID: "d2", MessageID: "AddPerson-2-1", Status: outbox.Failed, Tries: 5, Err: string(make([]byte, 300))}, // \u0000 × 300
		{TaskID: "t-3", DeviceID: "d3", MessageID: "DeletePerson-3-1", Status: outbox.Expired},
	}
	stale := [][]byte{[]byte("kept")}
	payloads := appendResultsJSON(stale, results, nil)
	if len(payloads) != 1+len(results) || string(payloads[0]) != "kept" {
		t.Fatalf("%d payloads, first %q: want the 1 given and %d appended", len(payloads), payloads[0], len(results))
	}
	for i, r := range results {
		want, err := json.Marshal(upstreamResult(r))
		if err != nil {
			t.Fatal(err)
		}
		got := payloads[1+i]
		if string(got) != string(want) {
			t.Errorf("result %d: %s, want %s", i, got, want)
		}
		if cap(got) != len(got) {
			t.Errorf("result %d: capacity %d past its %d bytes: an append would run into the next", i, cap(got), len(got))
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
	// A reporter's round of 45 results (what one gathering takes at 64 terminals acking
	// after 20 ms), per result.
	round := make([]outbox.Result, 45)
	for i := range round {
		round[i] = r
	}
	b.Run("round-of-45", func(b *testing.B) {
		b.ReportAllocs()
		var payloads [][]byte
		for b.Loop() {
			payloads = appendResultsJSON(payloads[:0], round, nil)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(round)), "ns/result")
	})
}
