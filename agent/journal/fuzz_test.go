package journal

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzRecover writes arbitrary bytes as the only segment (or after a valid prefix) and
// checks that Open and Replay never panic and that what recovery keeps can be appended to.
func FuzzRecover(f *testing.F) {
	valid := appendFileHeader(nil, segmentKind, 1)
	valid = appendFrame(valid, []byte("first"))
	valid = appendFrame(valid, []byte("second"))
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(append([]byte(nil), valid...), make([]byte, 40)...))
	f.Add([]byte("FAJRNL"))
	f.Add([]byte{})
	if seeds, _ := filepath.Glob("testdata/*.wal"); len(seeds) > 0 {
		for _, s := range seeds {
			if b, err := os.ReadFile(s); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.wal"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, skip := range []bool{false, true} {
			j, err := Open(dir, &Options{SkipCorrupt: skip, Sync: SyncNone, MaxRecordSize: 1 << 16})
			if err != nil {
				continue
			}
			n := 0
			if err := j.Replay(func([]byte) error { n++; return nil }); err != nil {
				t.Fatalf("Replay after a successful Open: %v", err)
			}
			if err := j.Append([]byte("appended")); err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
			j.Close()
			j, err = Open(dir, &Options{SkipCorrupt: skip, Sync: SyncNone, MaxRecordSize: 1 << 16})
			if err != nil {
				t.Fatalf("reopen after append: %v", err)
			}
			m := 0
			j.Replay(func([]byte) error { m++; return nil })
			j.Close()
			if m != n+1 {
				t.Fatalf("replayed %d records, then %d after one append", n, m)
			}
		}
	})
}
