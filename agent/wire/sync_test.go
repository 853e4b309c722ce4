package wire

import (
	"strings"
	"testing"
	"time"
)

func TestSyncReportRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 27, 23, 4, 5, 123456789, time.FixedZone("CST", 8*3600))
	s := SyncReport{DeviceID: "2042253", Reason: SyncDigest, Status: SyncDone, Missing: 2, Extra: 1, At: FormatSyncAt(at)}
	b, err := s.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"deviceId":"2042253","reason":"digest","status":"done","missing":2,"extra":1,"changed":0,"at":"2026-11-27T15:04:05.123Z"}`
	if string(b) != want {
		t.Errorf("sync report\n%s\nwant\n%s", b, want)
	}
	back, err := ParseSyncReport(b)
	if err != nil || back != s {
		t.Errorf("ParseSyncReport = %+v, %v", back, err)
	}
	failed := SyncReport{DeviceID: "2042253", Reason: SyncSetWhitelist, Status: SyncFailed, Changed: 4, At: "2026-11-27T15:04:05Z", Error: "refused by the terminal: code 23 (capacity)"}
	b, err = failed.AppendJSON([]byte("x"))
	if err != nil || !strings.HasPrefix(string(b), `x{"deviceId"`) || !strings.HasSuffix(string(b), `"error":"refused by the terminal: code 23 (capacity)"}`) {
		t.Errorf("failed report %s, %v", b, err)
	}
	if got := (Topics{Devices: "faceagent/gw/devices/"}).DeviceSync("2042253"); got != "faceagent/gw/devices/2042253/sync" {
		t.Errorf("topic %s", got)
	}
	if got := GatewayTopics("gw").DeviceSync("+"); got != "faceagent/gw/devices/+/sync" {
		t.Errorf("filter %s", got)
	}
}

func TestSyncReportRefusals(t *testing.T) {
	for in, want := range map[string]string{
		`{"reason":"digest","status":"done","at":"2026-11-27T15:04:05Z"}`:                               "sync report: deviceId: missing",
		`{"deviceId":"d","reason":"manual","status":"done","at":"2026-11-27T15:04:05Z"}`:                `sync report: reason: unknown reason "manual"`,
		`{"deviceId":"d","reason":"count","status":"ok","at":"2026-11-27T15:04:05Z"}`:                   `sync report: status: unknown status "ok"`,
		`{"deviceId":"d","reason":"count","status":"done","extra":-1,"at":"2026-11-27T15:04:05Z"}`:      "sync report: negative count (missing 0, extra -1, changed 0)",
		`{"deviceId":"d","reason":"count","status":"done"}`:                                             "sync report: at: missing",
		`{"deviceId":"d","reason":"count","status":"done","at":"yesterday"}`:                            `sync report: at: "yesterday" is not an RFC 3339 time`,
		`{"deviceId":"d","reason":"count","status":"done","at":"2026-11-27T15:04:05Z","error":"x"}`:     "sync report: error: only a failed report carries one (status done)",
		`{"deviceId":"d","reason":"count","status":"failed","at":"2026-11-27T15:04:05Z","missing":"3"}`: "sync report: missing: want a number, got JSON string",
		`["deviceId"]`: "sync report: : want an object, got JSON array",
	} {
		if _, err := ParseSyncReport([]byte(in)); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", in, err, want)
		}
	}
	long := SyncReport{DeviceID: "d", Reason: SyncCount, Status: SyncFailed, At: "2026-11-27T15:04:05Z", Error: strings.Repeat("e", MaxSyncError+1)}
	if _, err := long.AppendJSON(nil); err == nil {
		t.Error("a report with an error over MaxSyncError was written")
	}
}

// FuzzParseSyncReport: no input panics; an accepted report validates, is written back
// and reads back equal.
func FuzzParseSyncReport(f *testing.F) {
	f.Add([]byte(`{"deviceId":"2042253","reason":"digest","status":"done","missing":2,"extra":1,"changed":0,"at":"2026-11-27T15:04:05.123Z"}`))
	f.Add([]byte(`{"deviceId":"d","reason":"setWhitelist","status":"failed","at":"2026-11-27T15:04:05+08:00","error":"capacity","x":[1]}`))
	f.Add([]byte(`{"deviceId":"d\u0000","reason":"serial","status":"started","missing":1e2,"at":"2026-11-27T15:04:05Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSyncReport(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted an invalid report %+v: %v", s, err)
		}
		b, err := s.AppendJSON(nil)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		back, err := ParseSyncReport(b)
		if err != nil || back != s {
			t.Fatalf("%+v -> %s -> %+v, %v", s, b, back, err)
		}
	})
}
