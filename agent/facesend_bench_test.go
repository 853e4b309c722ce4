package agent

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// wireBytes counts what crossed a serial line for the commands a terminal received: each
// command's frame, and the frame of the ack it got (rebuilt: code 0, no message, the have
// of a PutFace), at 10 bits a byte (8N1). framing and encoding are the parts of those bytes
// that the serial frames and the msgp encoding add to what the messages say (msgpSplit).
type wireBytes struct {
	mu                  sync.Mutex
	cmds, acks, data    int
	framing, encoding   int
	putFaces, addPerson int
	addPersons          int
}

func (w *wireBytes) command(c face.Command, have int) {
	p, _ := c.AppendMsg(nil)
	a := face.Ack{MessageID: c.MessageID, Have: have}
	for _, p := range c.Persons { // an AddPersons ack: one result a person
		a.Results = append(a.Results, face.Result{ID: p.ID})
	}
	ap, _ := a.AppendMsg(nil)
	cmdEnc, _, _, err := msgpSplit(p, false)
	if err != nil {
		panic(err)
	}
	ackEnc, _, _, err := msgpSplit(ap, false)
	if err != nil {
		panic(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cmds += len(p) + serial.Overhead
	w.acks += len(ap) + serial.Overhead
	w.framing += 2 * serial.Overhead
	w.encoding += cmdEnc + ackEnc
	w.data += len(c.Face.Data)
	switch c.Op {
	case face.PutFace:
		w.putFaces++
	case face.AddPerson:
		w.addPerson++
	case face.AddPersons:
		w.addPersons++
	}
}

func (w *wireBytes) seconds(baud int) float64 { return float64(w.cmds+w.acks) * 10 / float64(baud) }

// BenchmarkFacesSerialWireBound: 1,000 persons, each with its own 1 KiB template, to one
// terminal on a serial line paced to 115,200 baud (the simulator's Baud): the face of each
// goes first (one PutFace), then the person: single, one AddPerson a person; batch30, the
// terminal announcing batch 30 and [dispatch] max_batch 30, so the persons queued behind
// the first go in AddPersons batches (each batch's faces first, each batch within one
// frame). Reported beside the wire-bound time of the same run: every command frame and
// every ack frame at 10 bits a byte, one after another. Bytes per person: overhead-% is
// what the serial frames and the msgp encoding add (frame headers and checksums, map and
// array headers, keys, type and length prefixes) against the person's own bytes (its
// fields and its face); beyond-person-% is every byte sent and acked beyond the person's
// own, the protocol's fields (message ids, op, the face's hash in its PutFace, offsets,
// have, codes, the ids a batch's results echo) included.
// Run once: go test -run '^$' -bench BenchmarkFacesSerialWireBound -benchtime 1x ./agent/
func BenchmarkFacesSerialWireBound(b *testing.B) {
	b.Run("single", func(b *testing.B) { benchFacesSerialWireBound(b, 1) })
	b.Run("batch30", func(b *testing.B) { benchFacesSerialWireBound(b, 30) })
}

func benchFacesSerialWireBound(b *testing.B, batch int) {
	const persons, size, baud = 1000, 1 << 10, 115200
	for range b.N {
		var w wireBytes
		r := newFaceRig(b, "serial", []string{"t1"}, sim.Options{Seed: 5, Baud: baud, HeartbeatInterval: 2 * time.Second,
			Batch: batch,
			OnCommand: func(_ string, c face.Command) {
				have := 0
				if c.Op == face.PutFace {
					have = c.Face.Offset + len(c.Face.Data)
				}
				w.command(c, have)
			}}, outbox.Settings{RetryInterval: 5 * time.Second, HeartbeatTimeout: 10 * time.Second, MaxBatch: batch}, 4<<10)
		var ids []string
		var personBytes int
		shas := make([]string, persons)
		for i := range persons {
			shas[i], _ = r.putFace(size, uint64(1000+i))
		}
		b.ResetTimer()
		start := time.Now()
		for i := range persons {
			id := fmt.Sprintf("m%04d", i)
			p := r.addPerson("t1", id, fmt.Sprintf("p%04d", i), shas[i], size)
			personBytes += size + len(p.ID) + len(p.Name) + len(p.ValidFrom) + len(p.ValidTo) + len(p.Rev) +
				len(p.Face.SHA256) + len(p.Face.Kind) + len(fmt.Sprint(p.Face.Size))
			ids = append(ids, id)
		}
		res := r.results(ids...)
		el := time.Since(start)
		b.StopTimer()
		for id, x := range res {
			if x.Status != outbox.Succeeded {
				b.Fatalf("%s: %+v", id, x)
			}
		}
		w.mu.Lock()
		bound := w.seconds(baud)
		wire := w.cmds + w.acks
		b.ReportMetric(el.Seconds(), "s/run")
		b.ReportMetric(bound, "wirebound-s/run")
		b.ReportMetric(el.Seconds()/bound, "x-wirebound")
		b.ReportMetric(float64(wire)/persons, "wire-B/person")
		b.ReportMetric(float64(personBytes)/persons, "person-B/person")
		b.ReportMetric(100*float64(w.framing+w.encoding)/float64(personBytes), "overhead-%")
		b.ReportMetric(100*float64(wire-personBytes)/float64(personBytes), "beyond-person-%")
		b.ReportMetric(float64(w.putFaces), "putfaces")
		b.ReportMetric(float64(w.addPerson+w.addPersons), "add-commands")
		w.mu.Unlock()
	}
}

// BenchmarkFacePhotoSerialCut: a 100 KiB photo to a terminal on a 115,200-baud serial line
// that breaks the transfer each time it would pass a multiple of 32 KiB (it keeps the
// chunk up to there and is down for 3 s); reported: face bytes and all wire bytes sent
// against the photo's size.
// Run: go test -run '^$' -bench BenchmarkFacePhotoSerialCut -benchtime 1x ./agent/
func BenchmarkFacePhotoSerialCut(b *testing.B) {
	const size, baud, every = 100 << 10, 115200, 32 << 10
	for range b.N {
		var w wireBytes
		r := newFaceRig(b, "serial", []string{"t1"}, sim.Options{Seed: 6, Baud: baud, HeartbeatInterval: 500 * time.Millisecond,
			CrashDowntime: 3 * time.Second,
			OnCommand: func(_ string, c face.Command) {
				w.command(c, c.Face.Offset+len(c.Face.Data))
			}}, outbox.Settings{RetryInterval: 2 * time.Second, HeartbeatTimeout: 1500 * time.Millisecond}, 4<<10)
		r.fleet.Terminal("t1").SetCutFaceEvery(every)
		sha, _ := r.putFace(size, 77)
		b.ResetTimer()
		r.addPerson("t1", "m1", "p1", sha, size)
		if x := r.results("m1")["m1"]; x.Status != outbox.Succeeded {
			b.Fatalf("m1: %+v", x)
		}
		b.StopTimer()
		cuts := r.fleet.Terminal("t1").Stats().FaceCuts
		w.mu.Lock()
		b.ReportMetric(float64(cuts), "cuts")
		b.ReportMetric(float64(w.data)/size, "x-photo-data")
		b.ReportMetric(float64(w.cmds)/size, "x-photo-wire")
		w.mu.Unlock()
	}
}
