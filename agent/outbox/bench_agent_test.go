package outbox

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// agentTasks are n tasks shaped like the agent's (ids as intake.Task.MessageID makes them)
// for the load tools/bench/rss.sh submits (taskctl submit -generate n -devices devs): a
// person per task and terminal, every 7th task a DeletePerson of the person before it,
// which supersedes that person's AddPerson while it is still queued.
func agentTasks(n, devs int) []Task {
	out := make([]Task, n)
	for i := range out {
		op, person := "AddPerson", strconv.Itoa(1000+i/devs)
		if i%7 == 6 && i >= devs {
			op, person = "DeletePerson", strconv.Itoa(1000+i/devs-1)
		}
		out[i] = Task{
			MessageID: fmt.Sprintf("%s-%s-%d", op, person, 1494527067538440192+int64(i)*7919),
			TaskID:    fmt.Sprintf("5f3a9c1e-%d", i+1),
			DeviceID:  fmt.Sprintf("t%02d", i%devs+1),
			Op:        op,
			PersonID:  person,
			Payload: fmt.Appendf(nil, `{"id":"%s","name":"Person %s","validFrom":"2026-01-01T00:00:00Z","validTo":"2030-12-31T23:59:59Z"}`,
				person, person),
		}
	}
	return out
}

// BenchmarkMemoryPerTaskAgent is BenchmarkMemoryPerTask for the load of tools/bench/rss.sh:
// 10,000 tasks shaped like the agent's for 64 terminals, taken in by batches of 100, none
// sent. B/task is the live heap they add (after GC); unused-B/task the growth of the heap's
// fragmentation (bytes free in spans that hold live objects); allocs/task and
// garbage-B/task what the intake allocated in all.
func BenchmarkMemoryPerTaskAgent(b *testing.B) {
	const n, devs = 10_000, 64
	tasks := agentTasks(n, devs)
	unused := []metrics.Sample{{Name: "/memory/classes/heap/unused:bytes"}}
	for range b.N {
		o, err := Open(b.TempDir(), nopSender, &Options{Journal: journal.Options{Sync: journal.SyncNone}})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		metrics.Read(unused)
		u0 := unused[0].Value.Uint64()
		for i := 0; i < n; i += 100 {
			for _, err := range o.EnqueueBatch(tasks[i : i+100]) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		metrics.Read(unused)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/task")
		b.ReportMetric(float64(int64(unused[0].Value.Uint64())-int64(u0))/n, "unused-B/task")
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/task")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "garbage-B/task")
		runtime.KeepAlive(tasks)
		o.Close()
	}
}

// cycleSender is a non-blocking Sender that remembers the command last sent to each device.
type cycleSender struct{ last map[string]string }

func (s *cycleSender) Send(_ context.Context, dev string, cmd Command) error {
	s.last[dev] = cmd.MessageID
	return nil
}
func (*cycleSender) SendsWithoutBlocking(string) bool { return true }

// BenchmarkTaskCycle measures a task's whole way through the outbox as the agent drives it,
// 64 terminals at a time: one EnqueueBatch of a task per terminal (each sent at once, the
// terminals being idle), an Ack each (finishing it), then Results and MarkReported for the
// 64 results. An op is one such round; allocs/task and B/task divide by its 64 tasks.
func BenchmarkTaskCycle(b *testing.B) {
	const devs = 64
	snd := &cycleSender{last: map[string]string{}}
	o, err := Open(b.TempDir(), snd, &Options{Journal: journal.Options{Sync: journal.SyncNone}, CompactAfter: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	tasks := agentTasks(devs*(b.N+1), devs)
	devIDs := make([]string, devs)
	for i := range devIDs {
		devIDs[i] = tasks[i].DeviceID
		o.Heartbeat(devIDs[i])
	}
	round := func(i int) {
		for _, err := range o.EnqueueBatch(tasks[i*devs : (i+1)*devs]) {
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, dev := range devIDs {
			o.Ack(dev, snd.last[dev], 0, "")
		}
		res, err := o.Results(100)
		if err != nil || len(res) != devs {
			b.Fatalf("%d results, %v", len(res), err)
		}
		ids := make([]string, len(res))
		for j, r := range res {
			ids[j] = r.MessageID
		}
		if err := o.MarkReported(ids...); err != nil {
			b.Fatal(err)
		}
	}
	round(0) // the devices' state, the table's indexes and the scratch space exist
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range b.N {
		round(i + 1)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*devs), "allocs/task")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N*devs), "B/task")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*devs), "ns/task")
}

// BenchmarkBlobCompaction measures one compaction of the id chunks (blobs.go; made under
// the outbox's lock) with rss.sh's 10,000 tasks in the table.
func BenchmarkBlobCompaction(b *testing.B) {
	o, err := Open(b.TempDir(), nopSender, &Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	tasks := agentTasks(10_000, 64)
	for i := 0; i < len(tasks); i += 100 {
		o.EnqueueBatch(tasks[i : i+100])
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	b.ReportAllocs()
	for range b.N {
		o.t.compactBlobs()
	}
	b.ReportMetric(float64(o.t.blobs.live)/1e3, "live-KB")
}
