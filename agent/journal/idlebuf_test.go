package journal

import (
	"bytes"
	"testing"
)

// TestLargeBatchBufferNotKept: after a large batch the journal keeps no write buffer
// sized for it. The whitelist store writes a terminal's whole list in parts of 256 KiB;
// keeping its two buffers at that size would hold half a megabyte for as long as the
// process runs, idle.
func TestLargeBatchBufferNotKept(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{Sync: SyncNone})
	defer j.Close()
	big := bytes.Repeat([]byte("x"), 256<<10)
	for range 3 {
		if err := j.Append(big); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Append([]byte("small")); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	held := cap(j.buf) + cap(j.spare)
	j.mu.Unlock()
	if held > 2*maxSpareBuffer {
		t.Fatalf("the journal holds %d bytes of write buffers after its large batches; want at most %d", held, 2*maxSpareBuffer)
	}
}
