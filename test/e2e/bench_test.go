package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
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
//     same mqttlink the agent uses). It runs first; agent, agent-persist,
//     agent-persist-bo and poll500ms report pct-ceiling against its rate.
//   - agent: the agent end to end. Each op is 20 tasks per terminal (1,280 tasks;
//     FACEAGENT_BENCH_PER_TERMINAL changes the 20) submitted in batches of 64 by a back
//     office subscribed to results, deadletters and forwarded acks, and followed to their
//     last result. Broker sessions in memory ([broker] persist = false).
//   - agent-vs-ceiling: agent (as in agent) and ceiling set up side by side; every op is a
//     pair, a round of each with the same number of tasks, the ceiling first in even ops
//     and the agent first in odd ones, so that drift in the machine's load and the garbage
//     a round leaves to the next fall on both alike. pct-ceiling is the median over the
//     ops of the pair's agent rate / ceiling rate (each pair's ratio is logged);
//     tasks/s and ceiling-tasks/s are from the summed times.
//   - agent-vs-ceiling-10k: the same with the issue's own workload as the op: 10,000 tasks
//     over the 64 terminals (157 or 156 each, ~3.5 s a round), so that an op's fixed
//     costs (the intake's fsync before the first command, the last result's trip back)
//     weigh as they do in the run.
//   - agent-persist: the same as agent with the default persist = true: the embedded broker
//     keeps sessions in its sessions journal (agent/broker) in data_dir.
//   - agent-persist-bo: the same with a back office whose session outlives its connection
//     (expiry 1 h), so that every result and forwarded ack is kept in the sessions journal
//     until acked.
//   - poll500ms: the field report's design (docs/design.md "The field report"), same
//     terminals and broker kind, for contrast:
//     a loop that wakes every 500 ms and sends each device at most one command per tick
//     (the next only on a later tick, after the ack). Each op is 4 tasks per terminal.
//
// The terminals (device/sim) and the back office stand for machines of their own: they
// speak MQTT through internal/mqttwire rather than paho, the same packets at a fraction of
// the CPU, so that they take little of the machine from the rigs they drive.
func BenchmarkThroughput64x20ms(b *testing.B) {
	ceilingRate = 0
	b.Run("ceiling", benchCeiling)
	b.Run("agent", func(b *testing.B) { benchAgentThroughput(b, false) })
	b.Run("agent-vs-ceiling", func(b *testing.B) { benchAgentVsCeiling(b, benchTerminals*benchPerTerminal()) })
	b.Run("agent-vs-ceiling-10k", func(b *testing.B) { benchAgentVsCeiling(b, 10_000) })
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
	fsyncs0 := fsyncs()   // a scrape of /metrics: outside the measured time and allocations
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		round(benchTerminals * perTerminal)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	tasks := b.N * benchTerminals * perTerminal
	reportThroughput(b, tasks, elapsed, cpu)
	b.ReportMetric(float64(fsyncs()-fsyncs0)/float64(tasks), "fsyncs/task")
}

// startAgentRig starts the agent, its 64 simulated terminals and a back office
// (benchBackOffice), all stopped by b's cleanup, and returns round: submit n tasks (batches
// of 64, the last one shorter when n is not a multiple; spread over the terminals) and
// wait for their results; and fsyncs: the write+fsync rounds of the outbox's journal so
// far (the journal that intake and results wait for).
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
	bo := connectBenchBackOffice(b, addr, "gw-b", backOfficeSessionExpiry)
	seq := 0
	fsyncs = func() uint64 { return uint64(metric(b, a, "faceagent_journal_fsyncs_total")) }
	return func(n int) {
		var batch []wire.Task
		for i := range n {
			batch = append(batch, wire.Task{TaskID: fmt.Sprintf("b-%d", seq), DeviceID: ids[i%benchTerminals], Op: face.AddPerson,
				Person: face.Person{ID: fmt.Sprint(seq)}})
			seq++
			if len(batch) == 64 || i == n-1 { // the last batch may be short (n = 10,000)
				p, _ := json.Marshal(batch)
				bo.publish("faceagent/gw-b/tasks", p)
				batch = nil
			}
		}
		bo.waitResults(seq, 2*time.Minute)
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
	link, err := mqttlink.New(mqttlink.Config{Bus: br, Devices: ids, EventBuffer: 1024})
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
	round(benchTerminals) // warm-up
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		round(benchTerminals * perTerminal)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	ceilingRate = reportThroughput(b, b.N*perTerminal*benchTerminals, elapsed, cpu)
}

// benchAgentVsCeiling runs the ceiling and the agent (sessions in memory) side by side,
// a round of each with tasks tasks in every op, alternating which goes first, and reports
// the median of the ops' agent/ceiling rate ratios as pct-ceiling (see
// BenchmarkThroughput64x20ms), the rates from the summed times (tasks/s,
// ceiling-tasks/s), and the agent's fsyncs per task. No CPU figure: both rigs live in one
// process at once.
func benchAgentVsCeiling(b *testing.B, tasks int) {
	ceiling := startCeilingRig(b)
	agent, fsyncs := startAgentRig(b, false, 0)
	ceiling(benchTerminals) // warm-up
	agent(benchTerminals)
	fsyncs0 := fsyncs()
	timed := func(round func(int)) time.Duration {
		t0 := time.Now()
		round(tasks)
		return time.Since(t0)
	}
	b.ResetTimer()
	var inCeiling, inAgent time.Duration
	ratios := make([]float64, 0, b.N) // agent rate / ceiling rate, per op
	for i := range b.N {
		var c, a time.Duration
		if i%2 == 0 {
			c = timed(ceiling)
			a = timed(agent)
		} else {
			a = timed(agent)
			c = timed(ceiling)
		}
		inCeiling, inAgent = inCeiling+c, inAgent+a
		ratios = append(ratios, c.Seconds()/a.Seconds()) // same tasks: the rates' ratio
	}
	b.StopTimer()
	n := float64(b.N * tasks)
	rate, ceilRate := n/inAgent.Seconds(), n/inCeiling.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(ceilRate, "ceiling-tasks/s")
	b.ReportMetric(100*median(slices.Clone(ratios)), "pct-ceiling")
	b.ReportMetric(100*rate/(float64(benchTerminals)/benchAck.Seconds()), "pct-theory")
	b.ReportMetric(float64(fsyncs()-fsyncs0)/n, "fsyncs/task")
	pct := make([]string, len(ratios))
	for i, r := range ratios {
		pct[i] = strconv.FormatFloat(100*r, 'f', 1, 64)
	}
	b.Logf("%d ops of %d tasks, pct-ceiling per op (ceiling first in even ops): %s", b.N, tasks, strings.Join(pct, " "))
}

// median returns the median of xs (the mean of the middle two for an even count); xs is
// sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// startCeilingRig starts an embedded broker, 64 simulated terminals and the minimal driver
// (stopped by b's cleanup) and returns round: send n commands spread over the terminals as
// the agent rig spreads n tasks (terminal i gets n/64, plus one when i < n%64), each the
// moment the terminal acked the one before (published from mqttlink's Deliver, on the
// goroutine that delivered the ack), and wait for the last acks.
func startCeilingRig(b *testing.B) (round func(n int)) {
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
	link, err = mqttlink.New(mqttlink.Config{Bus: br, Devices: ids, EventBuffer: 1024, Deliver: deliver})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { link.Close() })
	return func(n int) {
		busy := min(n, len(ids))
		finished.Add(busy)
		for i, id := range ids[:busy] {
			t := terms[id]
			t.mu.Lock()
			t.left = n / len(ids)
			if i < n%len(ids) {
				t.left++
			}
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
