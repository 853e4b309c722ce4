package outbox

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// TestTaskCyclesKeepTheOutboxBounded: task cycles as the agent drives them (64 terminals,
// a task each taken in, sent, acked, its result reported), with the default compaction
// settings, keep the outbox's directory within its bound (doc.go, "Disk"): the open
// segment's reserved blocks, the snapshot (twice while a new one is written), up to
// max(CompactBytes, snapshot) appended since it (or CompactAfter dead records, fewer bytes
// with tasks of the usual size), what was appended while the snapshot was being written,
// and the payload file. With the agent's
// tasks the record count starts the compactions; with payloads of 8 KiB (more than a
// command to a terminal holds: records larger than usual) the bytes do, where 50,000 dead
// records would be 400 MB.
func TestTaskCyclesKeepTheOutboxBounded(t *testing.T) {
	for _, c := range []struct {
		name   string
		rounds int
		pad    int // bytes added to each payload
	}{
		{"agent-tasks", 500, 0},
		{"8KiB-payloads", 200, 8 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			const devs = 64
			dir := t.TempDir()
			snd := &cycleSender{last: map[string]string{}}
			o, err := Open(dir, snd, &Options{Journal: journal.Options{Sync: journal.SyncNone}})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			tasks := agentTasks(devs*c.rounds, devs)
			if c.pad > 0 {
				for i := range tasks {
					tasks[i].Payload = fmt.Appendf(nil, `{"id":"%d","name":"%s"}`, i, strings.Repeat("n", c.pad))
				}
			}
			devIDs := make([]string, devs)
			for i := range devIDs {
				devIDs[i] = tasks[i].DeviceID
				o.Heartbeat(devIDs[i])
			}
			segment := int64(64 << 20) // the journal's default SegmentSize, which the agent keeps
			// What a few rounds append: the snapshot is written in the background, and the
			// rounds go on meanwhile (a loaded machine: several of them).
			roundBytes := 4 * int64(devs*(c.pad+2<<10))
			var most, bound int64
			for r := range c.rounds {
				for _, err := range o.EnqueueBatch(tasks[r*devs : (r+1)*devs]) {
					if err != nil {
						t.Fatal(err)
					}
				}
				for _, dev := range devIDs {
					o.Ack(dev, snd.last[dev], 0, "")
				}
				res, err := o.Results(devs)
				if err != nil || len(res) != devs {
					t.Fatalf("round %d: %d results, %v", r, len(res), err)
				}
				ids := make([]string, len(res))
				for j, res := range res {
					ids[j] = res.MessageID
				}
				if err := o.MarkReported(ids...); err != nil {
					t.Fatal(err)
				}
				o.mu.Lock()
				snapshot := o.baseBytes
				o.mu.Unlock()
				disk := testutil.DirDiskBytes(t, dir)
				bound = max(bound, segment+2*snapshot+max(16<<20, snapshot)+roundBytes+2<<20) // CompactBytes, default
				if most = max(most, disk); disk > bound {
					t.Fatalf("round %d: the outbox occupies %d bytes, over its bound %d (snapshot %d)", r, disk, bound, snapshot)
				}
			}
			st := o.JournalStats()
			if st.Snapshots == 0 {
				t.Fatalf("no compaction in %d task cycles: %+v", devs*c.rounds, st)
			}
			t.Logf("%d task cycles: at most %d bytes on disk (bound %d), %d snapshots", devs*c.rounds, most, bound, st.Snapshots)
		})
	}
}
