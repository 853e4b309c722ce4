package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
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

// recoveryAck is the recovering terminal's ack latency.
const recoveryAck = 5 * time.Millisecond

// recoveryPersons is the terminal's whitelist: 10,000 persons, or
// FACEAGENT_BENCH_PERSONS.
func recoveryPersons() int {
	if n, err := strconv.Atoi(os.Getenv("FACEAGENT_BENCH_PERSONS")); err == nil && n > 0 {
		return n
	}
	return 10_000
}

// recoveryPerson is the i-th person of the recovery benchmark, with the agent's rev of its
// record (what a correction carries).
func recoveryPerson(i int) face.Person {
	p := syncPerson(i)
	p.Rev = face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String()
	return p
}

// BenchmarkRecovery10kx5ms: one protocol 2 terminal over MQTT whose desired whitelist
// holds 10,000 persons (FACEAGENT_BENCH_PERSONS changes it) is factory reset (it holds
// nothing and boots with a heartbeat); it acks each command 5 ms after it arrives. An op
// is one recovery, timed from the reset until the terminal is in sync: its digest is the
// desired one and the agent's device state says inSync. Default config (journal sync
// "always", list_limit 100, heartbeats every second).
//
// Each op first runs the ceiling (not timed): the same terminal, reset the same way, on a
// bare embedded broker, driven by a client that sends exactly the commands a repair needs
// (one ListPersons, whose page is empty, then an AddPerson per person with its rev), each
// the moment the ack of the one before arrived (on the ack's delivery goroutine): what
// these terminals, the broker and TCP on this machine allow at all. Ceiling and agent run
// back to back, so that a change of the machine's load (other processes) hits both alike.
//
// Metrics, each a mean over the ops: ceiling-s-to-last-ack (the reset to the ceiling's
// last ack) and ceiling-s-to-in-sync (to the first heartbeat after it with the wanted
// digest: in sync is judged from a heartbeat, so a client, however fast, knows it no
// sooner); s-to-done (the agent's done sync report) and s-to-in-sync (its device state's
// inSync); pct-ceiling, the ceiling's time to in sync over the agent's, and
// pct-ceiling-done, the ceiling's time to its last ack over the agent's to its done report
// (each the mean of the ops' ratios); pct-theory, the ack-bound product (commands × 5 ms)
// over the agent's time to in sync.
func BenchmarkRecovery10kx5ms(b *testing.B) {
	n := recoveryPersons()
	commands := 1 + n // an empty terminal's one ListPersons page, then the AddPersons
	theory := time.Duration(commands) * recoveryAck
	recoverOnce := startRecoveryRig(b, n)
	var ceilAck, ceilSync, toDone, toSync time.Duration
	var pct, pctDone float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ack, sync := recoveryCeiling(b, n)
		b.StartTimer()
		d, s := recoverOnce()
		ceilAck, ceilSync, toDone, toSync = ceilAck+ack, ceilSync+sync, toDone+d, toSync+s
		pct += 100 * sync.Seconds() / s.Seconds()
		pctDone += 100 * ack.Seconds() / d.Seconds()
	}
	b.StopTimer()
	ops := time.Duration(b.N)
	b.ReportMetric((ceilAck / ops).Seconds(), "ceiling-s-to-last-ack")
	b.ReportMetric((ceilSync / ops).Seconds(), "ceiling-s-to-in-sync")
	b.ReportMetric((toDone / ops).Seconds(), "s-to-done")
	b.ReportMetric((toSync / ops).Seconds(), "s-to-in-sync")
	b.ReportMetric(pct/float64(b.N), "pct-ceiling")
	b.ReportMetric(pctDone/float64(b.N), "pct-ceiling-done")
	b.ReportMetric(100*theory.Seconds()/(toSync/ops).Seconds(), "pct-theory")
}

// startRecoveryRig starts the agent and its terminal (stopped by b's cleanup), gives the
// terminal its n persons by tasks (acked at once) and waits until it is in sync; recover
// then resets the terminal, sets its ack latency to 5 ms and returns the time from the
// reset to the done sync report and to in sync. It leaves the terminal acking at once
// again, holding its whole list.
func startRecoveryRig(b *testing.B, n int) (recoverOnce func() (toDone, toSync time.Duration)) {
	const id = "r0"
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-r\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\npersist = false\n"+
		"[dispatch]\nmax_queue_per_device = %d\n[log]\nlevel = \"error\"\n[[devices]]\nid = %q\n", b.TempDir(), 2*n, id)
	cfg, err := config.Parse("r.toml", []byte(src), nil)
	if err != nil {
		b.Fatal(err)
	}
	addr, a, _ := startAgentFull(b, cfg)
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{id}, sim.Options{Seed: 1, HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fleet.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	term := fleet.Terminal(id)
	bo := connectBackOffice(b, addr, "gw-r")
	var batch []wire.Task
	for i := range n {
		p := syncPerson(i)
		batch = append(batch, wire.Task{TaskID: "load-" + p.ID, DeviceID: id, Op: face.AddPerson, Person: p})
		if len(batch) == 64 || i == n-1 {
			msg, _ := json.Marshal(batch)
			bo.publish("faceagent/gw-r/tasks", msg)
			batch = nil
		}
	}
	bo.waitFor("the load's results", 5*time.Minute, func() bool { return len(bo.results) == n })
	want := term.Digest()
	inSync := func() bool { return metric(b, a, "faceagent_terminals_in_sync") == 1 }
	pollUntil(b, "the loaded terminal in sync", inSync)
	return func() (toDone, toSync time.Duration) {
		bo.mu.Lock()
		reports := len(bo.syncs[id])
		bo.mu.Unlock()
		term.SetAckLatency(sim.Latency{Kind: sim.Fixed, A: recoveryAck})
		start := time.Now()
		term.FactoryReset()
		term.SendHeartbeat() // a reset terminal boots and says so
		bo.waitFor("the done sync report", 10*time.Minute, func() bool {
			s := bo.syncs[id]
			return len(s) >= reports+2 && s[len(s)-1].Status != wire.SyncStarted
		})
		toDone = time.Since(start)
		bo.mu.Lock()
		last := bo.syncs[id][len(bo.syncs[id])-1]
		bo.mu.Unlock()
		if last.Status != wire.SyncDone || last.Missing != n {
			b.Fatalf("sync report %+v, want done with %d missing", last, n)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(time.Minute)
		for term.Digest() != want || !inSync() {
			select {
			case <-tick.C:
			case <-deadline:
				b.Fatalf("not in sync a minute after the done report (digest %s, want %s)", term.Digest(), want)
			}
		}
		toSync = time.Since(start)
		term.SetAckLatency(sim.Latency{})
		return toDone, toSync
	}
}

// recoveryCeiling resets a terminal holding n persons on a bare broker and sends it the
// commands of its repair one at a time, each from the delivery of the ack before; it
// returns the time from the reset until the last ack arrived, and until the first
// heartbeat after it carrying the wanted digest.
func recoveryCeiling(b *testing.B, n int) (toLastAck, toInSync time.Duration) {
	const id = "c0"
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	fleet, err := sim.StartMQTT("mqtt://"+br.Addr(), []string{id}, sim.Options{Seed: 1, HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	term := fleet.Terminal(id)
	for i := range n { // what the terminal held before its reset
		if err := term.TamperAdd(recoveryPerson(i)); err != nil {
			b.Fatal(err)
		}
	}
	want := term.Digest()

	var mu sync.Mutex
	waiting, next := "", 0 // the command out; the next person to add (-1: the listing)
	finished := make(chan struct{})
	inSync := make(chan struct{})
	var lastAck time.Time
	acked := false
	var link *mqttlink.Link
	send := func() { // called with mu held
		cmd := face.Command{MessageID: fmt.Sprintf("ceiling-%d", next), Op: face.AddPerson}
		if next < 0 {
			cmd.Op, cmd.Limit = face.ListPersons, face.DefaultListLimit
		} else {
			cmd.Person = recoveryPerson(next)
		}
		next++
		waiting = cmd.MessageID
		if err := link.Send(context.Background(), id, cmd); err != nil {
			b.Errorf("ceiling send: %v", err)
		}
	}
	deliver := func(ev device.Event) bool {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == device.Heartbeat {
			if acked && ev.Heartbeat.Digest == want.String() {
				acked = false
				close(inSync)
			}
			return true
		}
		if ev.Kind != device.Ack || ev.Ack.MessageID != waiting {
			return true
		}
		waiting = ""
		if next < n {
			send()
		} else {
			lastAck, acked = time.Now(), true
			close(finished)
		}
		return true
	}
	link, err = mqttlink.New(mqttlink.Config{Bus: br, Devices: []string{id}, EventBuffer: 1024, Deliver: deliver})
	if err != nil {
		b.Fatal(err)
	}
	defer link.Close()
	term.SetAckLatency(sim.Latency{Kind: sim.Fixed, A: recoveryAck})
	start := time.Now()
	term.FactoryReset()
	mu.Lock()
	next = -1
	send()
	mu.Unlock()
	select {
	case <-finished:
	case <-time.After(10 * time.Minute):
		b.Fatal("ceiling: the repair did not finish within ten minutes")
	}
	if got := term.Digest(); got != want {
		b.Fatalf("ceiling: digest %s after the repair, want %s", got, want)
	}
	select {
	case <-inSync:
	case <-time.After(time.Minute):
		b.Fatal("ceiling: no heartbeat with the wanted digest within a minute of the last ack")
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	return lastAck.Sub(start), elapsed
}
