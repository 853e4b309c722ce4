package outbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	bolt "go.etcd.io/bbolt"
)

// benchTask is a realistic whitelist task: an id like the field report's (docs/design.md
// "The field report"), a ~120-byte person.
func benchTask(i int) Task {
	return Task{
		MessageID: fmt.Sprintf("EditPerson-%d-%d", i%1000, 1494527067538440192+int64(i)),
		TaskID:    fmt.Sprintf("t-%d", i),
		DeviceID:  fmt.Sprintf("dev-%03d", i%100),
		Op:        "AddPerson",
		PersonID:  fmt.Sprintf("%d", i),
		Payload:   fmt.Appendf(nil, `{"id":"%d","name":"Person %d","validFrom":"2026-01-01T00:00:00Z","validTo":"2027-01-01T00:00:00Z"}`, i, i),
	}
}

var nopSender = SenderFunc(func(context.Context, string, Command) error { return nil })

// runProducers calls fn(i) for i in [0, n) from p goroutines.
func runProducers(b *testing.B, p, n int, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkDurableEnqueue compares durable intake (fsync on) through the outbox with bbolt's
// DB.Batch storing the same encoded records, at 1, 16 and 64 concurrent producers.
func BenchmarkDurableEnqueue(b *testing.B) {
	for _, p := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("producers=%d/outbox", p), func(b *testing.B) {
			o, err := Open(b.TempDir(), nopSender, &Options{MaxQueued: 1 << 30, MaxQueuedPerDevice: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			tasks := make([]Task, b.N)
			for i := range tasks {
				tasks[i] = benchTask(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			runProducers(b, p, b.N, func(i int) error { return o.Enqueue(tasks[i]) })
			b.StopTimer()
			st := o.j.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "enq/s")
			b.ReportMetric(float64(st.Records)/float64(max(st.Batches, 1)), "records/fsync")
		})
		b.Run(fmt.Sprintf("producers=%d/bbolt", p), func(b *testing.B) {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "bolt.db"), 0o600, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("outbox")); return err })
			recs := make([][]byte, b.N)
			for i := range recs {
				t := benchTask(i)
				r := record{Version: recordVersion, Kind: kindAdd, ID: t.MessageID, Task: t.TaskID, Device: t.DeviceID,
					Op: t.Op, Person: t.PersonID, Payload: t.Payload, Ord: uint64(i + 1), Added: time.Now().UnixNano()}
				recs[i], _ = r.MarshalMsg(nil)
			}
			b.ReportAllocs()
			b.ResetTimer()
			runProducers(b, p, b.N, func(i int) error {
				return db.Batch(func(tx *bolt.Tx) error {
					return tx.Bucket([]byte("outbox")).Put(fmt.Appendf(nil, "%016x", i), recs[i])
				})
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "enq/s")
		})
	}
}

var replayDirs sync.Map // records -> dir, built once per process

// replayDir writes a journal of n records: n/4 task lifecycles (add, send, finish, reported),
// what a day of traffic leaves before compaction.
func replayDir(b *testing.B, n int) string {
	if d, ok := replayDirs.Load(n); ok {
		return d.(string)
	}
	dir, err := os.MkdirTemp("", "outbox-replay-")
	if err != nil {
		b.Fatal(err)
	}
	j, err := journal.Open(dir, &journal.Options{Sync: journal.SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	put := func(r *record) {
		r.Version = recordVersion
		buf, _ = r.MarshalMsg(buf[:0])
		if _, err := j.AppendAsync(buf); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now().UnixNano()
	for i := 0; i < n/4; i++ {
		t := benchTask(i)
		put(&record{Kind: kindAdd, ID: t.MessageID, Task: t.TaskID, Device: t.DeviceID, Op: t.Op,
			Person: t.PersonID, Payload: t.Payload, Ord: uint64(i + 1), Added: now})
		put(&record{Kind: kindSend, ID: t.MessageID, Tries: 1, Next: now + 2e9})
		put(&record{Kind: kindFinish, ID: t.MessageID, Status: uint8(Succeeded), Done: now + 2e7})
		put(&record{Kind: kindReported, IDs: []string{t.MessageID}})
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	replayDirs.Store(n, dir)
	return dir
}

// BenchmarkReplay measures Open of an outbox whose journal holds 100k and 1M records
// (journal scan, msgp decode, table rebuild), and the journal scan alone.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		dir := replayDir(b, n)
		b.Run(fmt.Sprintf("records=%d/outbox-open", n), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for range b.N {
				o, err := Open(dir, nopSender, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				o.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			// CPU time (all threads, GC included) tells the work apart from waiting for a CPU
			// on a shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
		b.Run(fmt.Sprintf("records=%d/journal-scan", n), func(b *testing.B) {
			for range b.N {
				j, err := journal.Open(dir, nil)
				if err != nil {
					b.Fatal(err)
				}
				cnt := 0
				j.Replay(func([]byte) error { cnt++; return nil })
				j.Close()
				if cnt != n {
					b.Fatalf("%d records", cnt)
				}
			}
		})
	}
	b.Cleanup(func() {
		replayDirs.Range(func(_, d any) bool { os.RemoveAll(d.(string)); return true })
	})
}

// cpuTime is the process's user+system CPU time so far. Close's time is included in
// outbox-open; it is negligible (no records to flush).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryPerTask reports the heap a queued task costs: in all (B/task), and beyond
// the bytes of payloads kept on the heap (B/task-beyond-payload: table entry, indexes, ids;
// payloads are in the payload file unless it failed, so the two differ only then), for the
// table built by Enqueue and for the one Open rebuilds from the journal. payload-B/task is
// the payloads' mean length, file-B/task what the payload file holds per task.
func BenchmarkMemoryPerTask(b *testing.B) {
	const n = 100_000
	tasks := make([]Task, n)
	payload := 0
	for i := range tasks {
		tasks[i] = benchTask(i)
		payload += len(tasks[i].Payload)
	}
	for range b.N {
		dir := b.TempDir()
		o, err := Open(dir, nopSender, &Options{Journal: journal.Options{Sync: journal.SyncNone}, MaxQueued: n})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i += 1000 {
			for _, err := range o.EnqueueBatch(tasks[i : i+1000]) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		grown := float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		b.ReportMetric(grown/n, "B/task")
		b.ReportMetric((grown-float64(heapPayloadBytes(o)))/n, "B/task-beyond-payload")
		b.ReportMetric(float64(payload)/n, "payload-B/task")
		b.ReportMetric(float64(o.Stats().PayloadFileBytes)/n, "file-B/task")
		runtime.KeepAlive(tasks)
		o.Close()
		// Replayed tables cost the same? Measure the table Open builds from the journal.
		runtime.GC()
		runtime.ReadMemStats(&before)
		o, err = Open(dir, nopSender, &Options{MaxQueued: n})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/task-after-replay")
		o.Close()
	}
}

// heapPayloadBytes is how many payload bytes o keeps on the heap.
func heapPayloadBytes(o *Outbox) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.t.heapPay {
		n += len(p)
	}
	return n
}

// simDevices are terminals that ack every command after a fixed delay. They record the
// time from each ack to the next command's Send for the same device.
type simDevices struct {
	o        *Outbox
	delay    time.Duration
	mu       sync.Mutex
	ackAt    map[string]time.Time
	gaps     []time.Duration
	acked    atomic.Int64
	timersWG sync.WaitGroup
}

func (s *simDevices) Send(_ context.Context, dev string, cmd Command) error {
	now := time.Now()
	s.mu.Lock()
	if at, ok := s.ackAt[dev]; ok {
		s.gaps = append(s.gaps, now.Sub(at))
		delete(s.ackAt, dev)
	}
	s.mu.Unlock()
	s.timersWG.Add(1)
	time.AfterFunc(s.delay, func() {
		defer s.timersWG.Done()
		s.ack(dev, cmd.MessageID)
	})
	return nil
}

func (s *simDevices) ack(dev, id string) {
	s.mu.Lock()
	s.ackAt[dev] = time.Now()
	s.mu.Unlock()
	s.acked.Add(1)
	s.o.Ack(dev, id, 0, "")
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkDispatch runs 100 simulated terminals that ack after 20 ms (a ceiling of 5,000
// commands/s), once through the outbox and once through the field report's loop that polls
// every 500 ms, and reports throughput and ack-to-next-dispatch latency.
func BenchmarkDispatch(b *testing.B) {
	const devices, ackDelay = 100, 20 * time.Millisecond
	ceiling := float64(devices) / ackDelay.Seconds()
	b.Run("outbox", func(b *testing.B) {
		const perDevice = 50
		b.StopTimer()
		for range b.N {
			sim := &simDevices{delay: ackDelay, ackAt: map[string]time.Time{}}
			o, err := Open(b.TempDir(), sim, &Options{MaxQueued: 1 << 20, MaxQueuedPerDevice: 1 << 20, Journal: journal.Options{Sync: dispatchSync}})
			if err != nil {
				b.Fatal(err)
			}
			sim.o = o
			tasks := make([]Task, devices*perDevice)
			for i := range tasks {
				tasks[i] = benchTask(i)
			}
			// Intake first, with every terminal still offline; then their first heartbeats
			// start the dispatch that is measured.
			t0 := time.Now()
			for _, err := range o.EnqueueBatch(tasks) {
				if err != nil {
					b.Fatal(err)
				}
			}
			intake := time.Since(t0)
			b.StartTimer()
			start := time.Now()
			for d := range devices {
				o.Heartbeat(fmt.Sprintf("dev-%03d", d))
			}
			for sim.acked.Load() < int64(len(tasks)) {
				<-o.ResultsReady()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			sim.timersWG.Wait()
			o.Close()
			rate := float64(len(tasks)) / elapsed.Seconds()
			b.ReportMetric(rate, "cmd/s")
			b.ReportMetric(100*rate/ceiling, "%ceiling")
			b.ReportMetric(float64(percentile(sim.gaps, 0.50).Microseconds()), "ack-next-p50-µs")
			b.ReportMetric(float64(percentile(sim.gaps, 0.99).Microseconds()), "ack-next-p99-µs")
			b.ReportMetric(float64(intake.Milliseconds()), "intake-ms")
		}
	})
	// No dispatcher at all: each simulated terminal chains its own 20 ms acks. This is what the
	// machine's timers deliver right now, the practical ceiling for the row above.
	b.Run("no-dispatcher", func(b *testing.B) {
		const perDevice = 50
		for range b.N {
			var wg sync.WaitGroup
			start := time.Now()
			for range devices {
				wg.Add(1)
				var step func(left int)
				step = func(left int) {
					if left == 0 {
						wg.Done()
						return
					}
					time.AfterFunc(ackDelay, func() { step(left - 1) })
				}
				step(perDevice)
			}
			wg.Wait()
			rate := float64(devices*perDevice) / time.Since(start).Seconds()
			b.ReportMetric(rate, "cmd/s")
			b.ReportMetric(100*rate/ceiling, "%ceiling")
		}
	})
	b.Run("polling-500ms", func(b *testing.B) {
		const perDevice = 3
		for range b.N {
			sim := &simDevices{delay: ackDelay, ackAt: map[string]time.Time{}}
			p := &poller{queues: map[string][]string{}, inflight: map[string]bool{}}
			sim.o = nil
			for i := range devices * perDevice {
				t := benchTask(i)
				p.queues[t.DeviceID] = append(p.queues[t.DeviceID], t.MessageID)
			}
			total := int64(devices * perDevice)
			ackFn := func(dev string) { p.mu.Lock(); p.inflight[dev] = false; p.mu.Unlock() }
			start := time.Now()
			tick := time.NewTicker(500 * time.Millisecond)
			for sim.acked.Load() < total {
				<-tick.C
				for _, send := range p.due() {
					sim.mu.Lock()
					if at, ok := sim.ackAt[send[0]]; ok {
						sim.gaps = append(sim.gaps, time.Since(at))
						delete(sim.ackAt, send[0])
					}
					sim.mu.Unlock()
					dev := send[0]
					sim.timersWG.Add(1)
					time.AfterFunc(ackDelay, func() {
						defer sim.timersWG.Done()
						sim.mu.Lock()
						sim.ackAt[dev] = time.Now()
						sim.mu.Unlock()
						ackFn(dev)
						sim.acked.Add(1)
					})
				}
			}
			tick.Stop()
			elapsed := time.Since(start)
			sim.timersWG.Wait()
			rate := float64(total) / elapsed.Seconds()
			b.ReportMetric(rate, "cmd/s")
			b.ReportMetric(100*rate/ceiling, "%ceiling")
			b.ReportMetric(float64(percentile(sim.gaps, 0.50).Microseconds()), "ack-next-p50-µs")
			b.ReportMetric(float64(percentile(sim.gaps, 0.99).Microseconds()), "ack-next-p99-µs")
		}
	})
}

// poller is the field report's publish loop: on every tick, for each device with nothing in
// flight, send the oldest queued message (acks matched, which the report's code did not do).
type poller struct {
	mu       sync.Mutex
	queues   map[string][]string
	inflight map[string]bool
}

func (p *poller) due() [][2]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][2]string
	for dev, q := range p.queues {
		if len(q) == 0 || p.inflight[dev] {
			continue
		}
		out = append(out, [2]string{dev, q[0]})
		p.queues[dev] = q[1:]
		p.inflight[dev] = true
	}
	return out
}

var dispatchSync = journal.SyncAlways

// nbNopSender is a non-blocking Sender that remembers the last command sent: the outbox
// makes its sends inline, on the goroutine that called Ack.
type nbNopSender struct{ last Command }

func (s *nbNopSender) Send(_ context.Context, _ string, cmd Command) error {
	s.last = cmd
	return nil
}
func (*nbNopSender) SendsWithoutBlocking(string) bool { return true }

// BenchmarkAckNext measures an Ack that finishes the command in flight and sends the
// device's next one (the dispatch hot path), with the next payload read from the payload
// file (pread, page cache) or, as when the file cannot be written, from the heap.
func BenchmarkAckNext(b *testing.B) {
	noFile := func(string) (spillFile, error) { return nil, syscall.ENOSPC }
	for _, c := range []struct {
		name   string
		create func(string) (spillFile, error)
	}{{"payload-file", nil}, {"heap", noFile}} {
		b.Run(c.name, func(b *testing.B) {
			snd := &nbNopSender{}
			o, err := Open(b.TempDir(), snd, &Options{Journal: journal.Options{Sync: journal.SyncNone},
				MaxQueued: b.N + 1, MaxQueuedPerDevice: b.N + 1, createSpill: c.create,
				CompactAfter: 1 << 30}) // the hot path alone: no snapshot competes for the CPU
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			tasks := make([]Task, b.N+1)
			for i := range tasks {
				tasks[i] = benchTask(i)
				tasks[i].DeviceID = "dev"
				tasks[i].PersonID = "" // no coalescing: every task is sent
			}
			for i := 0; i < len(tasks); i += 1000 {
				for _, err := range o.EnqueueBatch(tasks[i:min(i+1000, len(tasks))]) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			if st := o.Stats(); (c.create == nil) != (st.PayloadsOnHeap == 0) {
				b.Fatalf("payloads not where the case says: %+v", st)
			}
			o.Heartbeat("dev")
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				id := snd.last.MessageID
				o.Ack("dev", id, 0, "")
				if snd.last.MessageID != tasks[i+1].MessageID || len(snd.last.Payload) != len(tasks[i+1].Payload) {
					b.Fatalf("after acking %s, sent %s", id, snd.last.MessageID)
				}
			}
		})
	}
}

// BenchmarkSpillRewrite measures one rewrite of the payload file (made under the outbox's
// lock) holding 10,000 live payloads of benchTask's size (the first also skips as many dead
// ones between them).
func BenchmarkSpillRewrite(b *testing.B) {
	const n = 10_000
	o, err := Open(b.TempDir(), nopSender, &Options{Journal: journal.Options{Sync: journal.SyncNone},
		spillMinDead: 1 << 40}) // no rewrite but the measured ones
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	tasks := make([]Task, 2*n)
	for i := range tasks {
		tasks[i] = benchTask(i)
		tasks[i].PersonID = ""
	}
	for i := 0; i < len(tasks); i += 1000 {
		for _, err := range o.EnqueueBatch(tasks[i : i+1000]) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := 0; i < len(tasks); i += 2 { // every other one leaves: dead bytes between live ones
		it := o.t.items.get(tasks[i].MessageID)
		o.t.items.del(it.id())
		o.t.dropPayload(it)
	}
	s := o.t.spill
	b.SetBytes(s.live)
	b.ResetTimer()
	for range b.N { // the first finds the dead bytes between the live ones, the others none
		if err := o.t.rewriteSpill(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.takeRetired().Close() // done without the lock (Outbox.unlock)
		b.StartTimer()
	}
}
