package backlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

func isTestKind(k byte) bool { return k == 'A' || k == 'H' }

func TestRecordRoundTrip(t *testing.T) {
	for _, c := range []struct {
		keyed        bool
		kind         byte
		id           uint64
		key, payload string
	}{
		{true, 'A', 1, "2042253", `{"messageId":"m","code":0,"message":""}`},
		{true, 'H', 1 << 40, "d", "p"},
		{true, kindReported, 300, "", ""},
		{true, kindSeen, 1, "", ""},
		{false, 'A', 1, "", `{"reason":"x"}`},
		{false, 'A', 1 << 40, "", "p"},
		{false, kindReported, 300, "", ""},
	} {
		rec := appendRecord(nil, c.keyed, c.kind, c.id, c.key, []byte(c.payload))
		kind, id, key, payload, err := parseRecord(rec, c.keyed, isTestKind)
		if err != nil || kind != c.kind || id != c.id || string(key) != c.key || string(payload) != c.payload {
			t.Errorf("%q: got %c %d %q %q %v", rec, kind, id, key, payload, err)
		}
	}
	for _, bad := range [][]byte{
		nil, {1}, {1, 'A'}, // too short
		{2, 'R', 1},          // version
		{1, 'R', 0},          // id 0
		{1, 'R', 1, 'x'},     // trailing bytes after a mark
		{1, 'S', 0x80, 0x80}, // cut uvarint
		{1, 'Z', 1},          // kind
		{1, 'A', 1, 0, 'p'},  // empty key
		{1, 'A', 1, 5, 'd'},  // key longer than the record
		{1, 'A', 1, 1, 'd'},  // empty payload
		{1, 'H', 1, 1, '/', 'p'}, {1, 'H', 1, 1, '+', 'p'}, {1, 'H', 1, 1, '#', 'p'}, {1, 'H', 1, 1, 0, 'p'},
		append([]byte{1, 'A', 1, 0x81, 0x02}, bytes.Repeat([]byte{'d'}, 300)...), // key over the bound
	} {
		if _, _, _, _, err := parseRecord(bad, true, isTestKind); err == nil {
			t.Errorf("keyed %q parsed", bad)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {1, 'A'}, {2, 'A', 1, 'x'}, {1, 'A', 1}, {1, 'R', 1, 'x'}, {1, 'Z', 1},
		{1, 'A', 0x80, 0x80}} {
		if _, _, _, _, err := parseRecord(bad, false, isTestKind); err == nil {
			t.Errorf("unkeyed %q parsed", bad)
		}
	}
}

// The seeds are records written by the encoders this package replaced (the deadletter
// log's, unkeyed; the forward log's, keyed): the encoder writes them byte for byte.
func TestRecordSeedsOfTheFirstFormat(t *testing.T) {
	want := map[string][]byte{
		"unkeyed/add.rec":      appendRecord(nil, false, 'A', 1, "", []byte(`{"reason":"malformed JSON: unexpected end","payload":"{\"taskId\""}`)),
		"unkeyed/reported.rec": appendRecord(nil, false, kindReported, 300, "", nil),
		"keyed/ack.rec":        appendRecord(nil, true, 'A', 1, "2042253", []byte(`{"messageId":"AddPerson-1-1","code":0,"message":""}`)),
		"keyed/heartbeat.rec": appendRecord(nil, true, 'H', 2, "2042253",
			[]byte(`{"deviceId":"2042253","time":"2026-11-22T14:00:00Z","firmware":"1.0","persons":12}`)),
		"keyed/reported.rec": appendRecord(nil, true, kindReported, 1<<20, "", nil),
		"keyed/seen.rec":     appendRecord(nil, true, kindSeen, 3, "", nil),
	}
	for name, rec := range want {
		got, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, rec) {
			t.Errorf("%s is %q, the encoder writes %q", name, got, rec)
		}
	}
}

// FuzzRecord: no input panics, and what parses encodes back to a record that parses to
// the same values.
func FuzzRecord(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/*.rec")
	if len(seeds) == 0 {
		f.Fatal("no seeds in testdata")
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.Contains(s, "/keyed/"))
	}
	f.Fuzz(func(t *testing.T, rec []byte, keyed bool) {
		kind, id, key, payload, err := parseRecord(rec, keyed, isTestKind)
		if err != nil {
			return
		}
		back := appendRecord(nil, keyed, kind, id, string(key), payload)
		k2, id2, key2, p2, err := parseRecord(back, keyed, isTestKind)
		if err != nil || k2 != kind || id2 != id || !bytes.Equal(key2, key) || !bytes.Equal(p2, payload) {
			t.Fatalf("%q re-encoded as %q", rec, back)
		}
	})
}

// copyLog copies a journal directory of testdata into a temporary one (Open writes).
func copyLog(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join("testdata", name, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in testdata/%s: %v", name, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A gateway upgraded in place replays the journals the code before this package wrote:
// testdata/deadletter-v1 (adds, reported marks, a snapshot without a seen record, more
// after it) and testdata/forward-v1 (acks and heartbeats coalesced and dropped by a bound
// of 12, reported marks, a snapshot closed by a seen record, adds after it), each with
// the backlog that code rebuilt from it (the .want files, "id [kind key] payload" and
// the next id).
func TestReplaysLogsOfTheFirstFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  Options
	}{
		{"deadletter-v1", Options{Kinds: []Kind{{Code: 'A', Name: "deadletter"}}, Durability: Durable(), Policy: Refuse,
			Topic: func(byte, string) string { return "faceagent/gw/deadletter" }}},
		{"forward-v1", forwardOptions(12, 1<<20, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opt.Journal = journal.Options{Sync: journal.SyncAlways, SegmentSize: 4096}
			b, err := Open(copyLog(t, c.name), c.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var got []string
			for _, e := range b.Entries() {
				if c.opt.Keyed {
					got = append(got, fmt.Sprintf("%d %c %s %s", e.ID, e.Kind, e.Key, e.Payload))
				} else {
					got = append(got, fmt.Sprintf("%d %s", e.ID, e.Payload))
				}
			}
			b.mu.Lock()
			got = append(got, fmt.Sprintf("next %d", b.nextID))
			b.mu.Unlock()
			want, err := os.ReadFile(filepath.Join("testdata", c.name+".want"))
			if err != nil {
				t.Fatal(err)
			}
			if w := strings.Split(strings.TrimSpace(string(want)), "\n"); !slices.Equal(got, w) {
				t.Errorf("replayed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}

// Replay skips an add that a snapshot holds and the segment after it repeats (appended
// between the checkpoint and the capture), and takes what follows.
func TestReplaySkipsSnapshotDuplicates(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range [][]byte{
		appendRecord(nil, true, 'A', 1, "d", []byte("a1")), // the snapshot …
		appendRecord(nil, true, 'A', 2, "d", []byte("a2")),
		appendRecord(nil, true, kindSeen, 3, "", nil),
		appendRecord(nil, true, 'A', 2, "d", []byte("a2")), // … the segment after it
		appendRecord(nil, true, kindReported, 1, "", nil),
		appendRecord(nil, true, 'A', 3, "d", []byte("a3")),
	} {
		if err := j.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	r := openRig(t, dir, forwardOptions(10, 1<<20, 0))
	defer r.Close()
	if got, want := r.lines(), []string{"A d a2", "A d a3"}; !slices.Equal(got, want) {
		t.Errorf("backlog %q, want %q", got, want)
	}
	if r.nextID != 4 {
		t.Errorf("next id %d, want 4", r.nextID)
	}
}
