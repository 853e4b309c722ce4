package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// BenchmarkThroughput64x20ms: 64 simulated terminals over MQTT, each acking 20 ms after a
// command arrives, so the device-bound ceiling is 64 / 20 ms = 3,200 tasks a second. Each
// op is 20 tasks per terminal (1,280 tasks) submitted in batches of 64 and followed to
// their last result; tasks/s and the share of the ceiling are reported.
func BenchmarkThroughput64x20ms(b *testing.B) {
	const terminals, perTerminal = 64, 20
	const ack = 20 * time.Millisecond
	ackLatency := sim.Latency{Kind: sim.Fixed, A: ack}
	if os.Getenv("FACEAGENT_BENCH_ACK0") != "" { // overhead alone: terminals ack at once
		ackLatency = sim.Latency{}
	}
	ids := make([]string, terminals)
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-b\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\npersist = false\n[journal]\nsync = \"batch\"\n[dispatch]\nretry_interval = \"2s\"\n[log]\nlevel = \"error\"\n", b.TempDir())
	for i := range ids {
		ids[i] = fmt.Sprintf("b%02d", i)
		src += fmt.Sprintf("[[devices]]\nid = %q\n", ids[i])
	}
	cfg, err := config.Parse("b.toml", []byte(src), nil)
	if err != nil {
		b.Fatal(err)
	}
	addr, stop := startAgent(b, cfg)
	defer stop()
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 1, AckLatency: ackLatency, HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	bo := connectBackOffice(b, addr, "gw-b")
	seq := 0
	round := func(n int) {
		var batch []intake.Task
		for i := range n {
			batch = append(batch, intake.Task{TaskID: fmt.Sprintf("b-%d", seq), DeviceID: ids[i%terminals], Op: face.AddPerson,
				Person: face.Person{ID: fmt.Sprint(seq)}})
			seq++
			if len(batch) == 64 {
				p, _ := json.Marshal(batch)
				bo.publish("faceagent/gw-b/tasks", p)
				batch = nil
			}
		}
		bo.waitFor("results", 2*time.Minute, func() bool { return len(bo.results) == seq })
	}
	round(terminals) // warm-up: every terminal online and one command through
	b.ResetTimer()
	start, first := time.Now(), seq
	for range b.N {
		round(terminals * perTerminal)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rate := float64(seq-first) / elapsed.Seconds()
	ceiling := float64(terminals) / ack.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(100*rate/ceiling, "%ceiling")
}
