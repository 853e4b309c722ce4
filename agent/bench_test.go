package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

const (
	benchTerminals = 64
	benchAck       = 20 * time.Millisecond
)

// benchAckLatency is the simulated terminals' ack latency: 20 ms, or none with
// FACEAGENT_BENCH_ACK0=1 (the pipeline's own limit).
func benchAckLatency() sim.Latency {
	if os.Getenv("FACEAGENT_BENCH_ACK0") != "" {
		return sim.Latency{}
	}
	return sim.Latency{Kind: sim.Fixed, A: benchAck}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPerTerminal is the tasks per terminal in one op: 20, or FACEAGENT_BENCH_PER_TERMINAL.
func benchPerTerminal() int {
	if n, err := strconv.Atoi(os.Getenv("FACEAGENT_BENCH_PER_TERMINAL")); err == nil && n > 0 {
		return n
	}
	return 20
}

// ceilingRate is the tasks/s the "ceiling" sub-benchmark measured last in this process;
// 0 when it did not run (a -bench pattern that leaves it out).
var ceilingRate float64

// reportThroughput reports tasks/s; pct-theory, the share of the theoretical device-bound
// ceiling (64 / 20 ms = 3,200 tasks/s); pct-ceiling, the share of what the "ceiling"
// driver reached on the same terminals and broker earlier in the same run (when it ran);
// and the process CPU per task (agent, broker and the simulated terminals and back office
// together: the figure least moved by other load on the machine).
func reportThroughput(b *testing.B, tasks int, elapsed, cpu time.Duration) float64 {
	rate := float64(tasks) / elapsed.Seconds()
	theory := float64(benchTerminals) / benchAck.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(100*rate/theory, "pct-theory")
	if ceilingRate > 0 {
		b.ReportMetric(100*rate/ceilingRate, "pct-ceiling")
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(tasks), "cpu-µs/task")
	return rate
}

// BenchmarkThroughput64x20ms: 64 simulated terminals over MQTT, each acking 20 ms after a
// command arrives, so the theoretical device-bound ceiling is 64 / 20 ms = 3,200 tasks a
// second.
//
//   - ceiling: what these terminals, the embedded broker and TCP on this machine can do at
//     all: a minimal driver with no journal and no outbox that publishes a terminal's next
//     command the moment its ack arrives (on the ack's delivery goroutine, through the
//     same mqttlink the agent uses). It runs first; the others report pct-ceiling against it.
//   - agent-vs-ceiling: agent and ceiling set up side by side, a round of each in every op,
//     so that both see the same load on the machine: its pct-ceiling is the steadier one.
//   - agent: the agent end to end. Each op is 20 tasks per terminal (1,280 tasks;
//     FACEAGENT_BENCH_PER_TERMINAL changes the 20) submitted in batches of 64 and followed
//     to their last result. Broker sessions in memory ([broker] persist = false).
//   - agent-persist: the same with the default persist = true: the embedded broker keeps
//     sessions in its sessions journal (agent/broker) in data_dir.
//   - agent-persist-bo: the same with a back office whose session outlives its connection
//     (expiry 1 h), so that every result and forwarded ack is kept in the sessions journal
//     until acked.
//   - poll500ms: the field report's design, same terminals and broker kind, for contrast:
//     a loop that wakes every 500 ms and sends each device at most one command per tick
//     (the next only on a later tick, after the ack). Each op is 4 tasks per terminal.
func BenchmarkThroughput64x20ms(b *testing.B) {
	ceilingRate = 0
	b.Run("ceiling", benchCeiling)
	b.Run("agent", func(b *testing.B) { benchAgentThroughput(b, false) })
	b.Run("agent-vs-ceiling", benchAgentVsCeiling)
	b.Run("agent-persist", func(b *testing.B) { benchAgentThroughput(b, true) })
	b.Run("agent-persist-bo", func(b *testing.B) { benchAgentThroughput(b, true, 3600) })
	b.Run("poll500ms", benchPollThroughput)
}

func benchAgentThroughput(b *testing.B, persist bool, backOfficeSessionExpiry ...uint32) {
	perTerminal := benchPerTerminal()
	var expiry uint32
	if len(backOfficeSessionExpiry) > 0 {
		expiry = backOfficeSessionExpiry[0]
	}
	round, fsyncs := startAgentRig(b, persist, expiry)
	round(benchTerminals) // warm-up: every terminal online and one command through
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0, fsyncs0 := time.Now(), cpuTime(), fsyncs()
	for range b.N {
		round(benchTerminals * perTerminal)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	tasks := b.N * benchTerminals * perTerminal
	reportThroughput(b, tasks, elapsed, cpu)
	b.ReportMetric(float64(fsyncs()-fsyncs0)/float64(tasks), "fsyncs/task")
}

// startAgentRig starts the agent, its 64 simulated terminals and a back office, all
// stopped by b's cleanup, and returns round: submit n tasks (batches of 64, spread over the
// terminals) and wait for their results; and fsyncs: the write+fsync rounds of the outbox's
// journal so far (the journal that intake and results wait for).
func startAgentRig(b *testing.B, persist bool, backOfficeSessionExpiry uint32) (round func(n int), fsyncs func() uint64) {
	ids := make([]string, benchTerminals)
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-b\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\npersist = %v\n[journal]\nsync = \"batch\"\n[dispatch]\nretry_interval = \"2s\"\n[log]\nlevel = \"error\"\n", b.TempDir(), persist)
	for i := range ids {
		ids[i] = fmt.Sprintf("b%02d", i)
		src += fmt.Sprintf("[[devices]]\nid = %q\n", ids[i])
	}
	cfg, err := config.Parse("b.toml", []byte(src), nil)
	if err != nil {
		b.Fatal(err)
	}
	addr, a, _ := startAgentFull(b, cfg) // stopped by b's cleanup
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 1, AckLatency: benchAckLatency(), HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fleet.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	bo := connectBackOfficeSession(b, addr, "gw-b", backOfficeSessionExpiry)
	seq := 0
	fsyncs = func() uint64 { return a.outbox.Load().JournalStats().Batches }
	return func(n int) {
		var batch []intake.Task
		for i := range n {
			batch = append(batch, intake.Task{TaskID: fmt.Sprintf("b-%d", seq), DeviceID: ids[i%benchTerminals], Op: face.AddPerson,
				Person: face.Person{ID: fmt.Sprint(seq)}})
			seq++
			if len(batch) == 64 {
				p, _ := json.Marshal(batch)
				bo.publish("faceagent/gw-b/tasks", p)
				batch = nil
			}
		}
		bo.waitFor("results", 2*time.Minute, func() bool { return len(bo.results) == seq })
	}, fsyncs
}

// benchPollThroughput simulates the field report's gateway: a 500 ms polling loop that
// sends one command per device per tick and waits for the next tick to send another.
func benchPollThroughput(b *testing.B) {
	const perTerminal, tick = 4, 500 * time.Millisecond
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ids := make([]string, benchTerminals)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%02d", i)
	}
	fleet, err := sim.StartMQTT("mqtt://"+br.Addr(), ids, sim.Options{Seed: 1, AckLatency: benchAckLatency(), HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	link, err := mqttlink.New(mqttlink.Config{Server: br.Server(), Devices: ids, EventBuffer: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer link.Close()

	seq := 0
	// round sends perDevice commands to every device, one per device per tick, and
	// returns once every command was acked.
	round := func(perDevice int) {
		sent := make(map[string]int, len(ids))       // commands sent per device this round
		waiting := make(map[string]string, len(ids)) // device → message id awaiting its ack
		acked := 0
		t := time.NewTicker(tick)
		defer t.Stop()
		deadline := time.After(2 * time.Minute)
		for acked < perDevice*len(ids) {
			select {
			case <-t.C:
				for _, id := range ids {
					if waiting[id] != "" || sent[id] == perDevice {
						continue
					}
					seq++
					cmd := face.Command{MessageID: fmt.Sprintf("poll-%d", seq), Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(seq)}}
					if err := link.Send(ctx, id, cmd); err != nil {
						b.Fatalf("poll send: %v", err)
					}
					waiting[id] = cmd.MessageID
					sent[id]++
				}
			case ev := <-link.Events():
				if ev.Kind == device.Ack && waiting[ev.DeviceID] == ev.Ack.MessageID {
					waiting[ev.DeviceID] = ""
					acked++
				}
			case <-deadline:
				b.Fatalf("poll: %d of %d acked", acked, perDevice*len(ids))
			}
		}
	}
	round(1) // warm-up
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		round(perTerminal)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	reportThroughput(b, b.N*perTerminal*benchTerminals, elapsed, cpu)
}

// benchCeiling drives the simulated terminals with nothing in between (startCeilingRig).
// Each op is 20 commands per terminal, as for agent.
func benchCeiling(b *testing.B) {
	ceilingRate = 0 // not a share of itself
	perTerminal := benchPerTerminal()
	round := startCeilingRig(b)
	round(1) // warm-up
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		round(perTerminal)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	ceilingRate = reportThroughput(b, b.N*perTerminal*benchTerminals, elapsed, cpu)
}

// benchAgentVsCeiling alternates a ceiling round and an agent round (sessions in memory)
// within every op, so that both see the same load on the machine, and reports the agent's
// rate as a share of the ceiling's from those paired rounds (pct-ceiling), with the
// ceiling's own rate (ceiling-tasks/s). No CPU figure: both run in one process at once.
func benchAgentVsCeiling(b *testing.B) {
	perTerminal := benchPerTerminal()
	ceiling := startCeilingRig(b)
	agent, fsyncs := startAgentRig(b, false, 0)
	ceiling(1)
	agent(benchTerminals)
	fsyncs0 := fsyncs()
	b.ResetTimer()
	var inCeiling, inAgent time.Duration
	for range b.N {
		t0 := time.Now()
		ceiling(perTerminal)
		t1 := time.Now()
		agent(benchTerminals * perTerminal)
		inCeiling, inAgent = inCeiling+t1.Sub(t0), inAgent+time.Since(t1)
	}
	b.StopTimer()
	tasks := float64(b.N * perTerminal * benchTerminals)
	rate, ceilRate := tasks/inAgent.Seconds(), tasks/inCeiling.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(ceilRate, "ceiling-tasks/s")
	b.ReportMetric(100*rate/ceilRate, "pct-ceiling")
	b.ReportMetric(100*rate/(float64(benchTerminals)/benchAck.Seconds()), "pct-theory")
	b.ReportMetric(float64(fsyncs()-fsyncs0)/tasks, "fsyncs/task")
}

// startCeilingRig starts an embedded broker, 64 simulated terminals and the minimal driver
// (stopped by b's cleanup) and returns round: send perDevice commands to every terminal,
// each the moment the terminal acked the one before (published from mqttlink's Deliver,
// on the goroutine that delivered the ack), and wait for the last acks.
func startCeilingRig(b *testing.B) (round func(perDevice int)) {
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	ids := make([]string, benchTerminals)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%02d", i)
	}
	fleet, err := sim.StartMQTT("mqtt://"+br.Addr(), ids, sim.Options{Seed: 1, AckLatency: benchAckLatency(), HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fleet.Close() })
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}
	type terminal struct {
		mu      sync.Mutex
		waiting string // message id of the command out
		left    int    // commands still to send this round
		seq     int
	}
	terms := map[string]*terminal{}
	for _, id := range ids {
		terms[id] = &terminal{}
	}
	var link *mqttlink.Link
	var finished sync.WaitGroup
	// next builds and publishes a terminal's next command; called with t.mu held.
	next := func(id string, t *terminal) {
		t.seq++
		t.left--
		cmd := face.Command{MessageID: fmt.Sprintf("ceiling-%s-%d", id, t.seq), Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(t.seq)}}
		t.waiting = cmd.MessageID
		if err := link.Send(context.Background(), id, cmd); err != nil {
			b.Errorf("ceiling send: %v", err)
		}
	}
	deliver := func(ev device.Event) bool {
		if ev.Kind != device.Ack {
			return true
		}
		t := terms[ev.DeviceID]
		t.mu.Lock()
		defer t.mu.Unlock()
		if ev.Ack.MessageID != t.waiting {
			return true
		}
		t.waiting = ""
		if t.left > 0 {
			next(ev.DeviceID, t)
		} else {
			finished.Done()
		}
		return true
	}
	link, err = mqttlink.New(mqttlink.Config{Server: br.Server(), Devices: ids, EventBuffer: 1024, Deliver: deliver})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { link.Close() })
	return func(perDevice int) {
		finished.Add(len(ids))
		for _, id := range ids {
			t := terms[id]
			t.mu.Lock()
			t.left = perDevice
			next(id, t)
			t.mu.Unlock()
		}
		done := make(chan struct{})
		go func() { finished.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatal("ceiling: round not finished within two minutes")
		}
	}
}
