package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// BenchmarkBatchesMQTT: 10,000 AddPerson tasks (no faces) to one MQTT terminal that takes
// 20 ms a command and 1 ms a person (sim AckLatency fixed 20 ms, PersonTime 1 ms) and
// announces batch 30, through the embedded broker, the links and the outbox: with
// [dispatch] max_batch 30, and with batches off (max_batch 1), in the same run. Reported:
// persons a second, commands the terminal received, and (batch30) the speed-up over off
// measured just before it.
// Run once: go test -run '^$' -bench BenchmarkBatchesMQTT -benchtime 1x ./agent/
func BenchmarkBatchesMQTT(b *testing.B) {
	const tasks = 10_000
	var offRate float64
	run := func(b *testing.B, maxBatch int) float64 {
		var rate float64
		for range b.N {
			r := newFaceRig(b, "mqtt", []string{"t1"}, sim.Options{Seed: 9, Batch: 30, PersonTime: time.Millisecond,
				AckLatency: sim.Latency{Kind: sim.Fixed, A: 20 * time.Millisecond}, HeartbeatInterval: time.Second},
				outbox.Settings{RetryInterval: 5 * time.Second, HeartbeatTimeout: 10 * time.Second, MaxBatch: maxBatch}, 64<<10)
			// Queued while the terminal is not yet heard from (its first heartbeat comes
			// within the fleet's start): the whole queue waits, as after an outage.
			ids := make([]string, tasks)
			ts := make([]outbox.Task, tasks)
			for i := range tasks {
				id, person := fmt.Sprintf("m%05d", i), fmt.Sprintf("p%05d", i)
				p := face.Person{ID: person, Name: "Person " + person, ValidTo: "2030-01-01T00:00:00Z"}
				p.Rev = face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String()
				payload, err := (&face.Command{MessageID: id, Op: face.AddPerson, Person: p}).AppendMsg(nil)
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = id
				ts[i] = outbox.Task{MessageID: id, TaskID: "task-" + id, DeviceID: "t1", Op: string(face.AddPerson), PersonID: person, Payload: payload}
			}
			r.ob.Pause("t1")
			for i, err := range r.ob.EnqueueBatch(ts) {
				if err != nil {
					b.Fatalf("%s: %v", ids[i], err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			r.ob.Resume("t1")
			res := r.results(ids...)
			el := time.Since(start)
			b.StopTimer()
			for id, x := range res {
				if x.Status != outbox.Succeeded {
					b.Fatalf("%s: %+v", id, x)
				}
			}
			if n := len(r.fleet.Terminal("t1").Persons()); n != tasks {
				b.Fatalf("terminal holds %d persons", n)
			}
			if err := r.fleet.Violations(); err != nil {
				b.Fatal(err)
			}
			st := r.fleet.Terminal("t1").Stats()
			rate = tasks / el.Seconds()
			b.ReportMetric(rate, "persons/s")
			b.ReportMetric(el.Seconds(), "s/run")
			b.ReportMetric(float64(st.Received), "commands")
		}
		return rate
	}
	b.Run("off", func(b *testing.B) { offRate = run(b, 1) })
	b.Run("batch30", func(b *testing.B) {
		rate := run(b, 30)
		if offRate > 0 {
			b.ReportMetric(rate/offRate, "x-off")
		}
	})
}
