package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed0e69bba5/faceagent/resp3"
)

// seeds adds every testdata/*.resp file to the corpus.
func seeds(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.resp"))
	if len(files) == 0 {
		f.Fatal("no seeds in testdata")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzResponse feeds arbitrary payloads to the response and notification parsers: they
// must never panic, and must classify every input as a value, a store error or a protocol
// error.
func FuzzResponse(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseReply(b)
		var se *ServerError
		switch {
		case err == nil:
			if v.Kind == resp3.SimpleError || v.Kind == resp3.BlobError {
				t.Fatalf("%q: error value without an error", b)
			}
		case errors.As(err, &se), errors.Is(err, ErrProtocol):
		default:
			t.Fatalf("%q: unclassified error %v", b, err)
		}
		n, err := parseNotification(b)
		if err == nil && n.Op != OpSet && n.Op != OpDelete {
			t.Fatalf("%q: notification with op %v", b, n.Op)
		}
	})
}

func TestParseNotification(t *testing.T) {
	for name, want := range map[string]Op{"notify-set.resp": OpSet, "notify-delete.resp": OpDelete, "notify-del-lower.resp": OpDelete} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		n, err := parseNotification(b)
		if err != nil || n.Op != want {
			t.Errorf("%s: %+v %v", name, n, err)
		}
		if want == OpSet && string(n.Value) != "abc" {
			t.Errorf("value %q", n.Value)
		}
	}
	for _, bad := range []string{"", "+OK\r\n", "*1\r\n$6\r\nNOTIFY\r\n", "*3\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$1\r\nx\r\n", "*2\r\n$4\r\nPING\r\n$3\r\nSET\r\n"} {
		if _, err := parseNotification([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestJitterBackoff(t *testing.T) {
	backoff := jitterBackoff(100_000, 10_000_000) // 100µs .. 10ms, in nanoseconds
	if d := backoff(0); d != 0 {
		t.Errorf("first attempt waits %v", d)
	}
	seen := map[int64]bool{}
	for attempt := 1; attempt < 40; attempt++ {
		for range 50 {
			d := backoff(attempt)
			ceil := min(int64(10_000_000), int64(100_000)<<min(attempt, 30))
			if d < 100_000 || int64(d) > ceil {
				t.Fatalf("attempt %d: %v outside [100µs, %v]", attempt, d, ceil)
			}
			seen[int64(d)] = true
		}
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays: no jitter", len(seen))
	}
}
