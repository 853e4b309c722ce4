package sim

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// faceBytes returns n seeded pseudo-random bytes and their sha256.
func faceBytes(seed uint64, n int) ([]byte, string) {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b, face.FaceSHA256(b)
}

// put sends the chunk data[from:to] of the face and returns the ack.
func (v *v2Link) put(t *testing.T, data []byte, sha string, from, to int) face.Ack {
	t.Helper()
	return v.do(t, face.Command{Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Offset: from, Data: data[from:to]}})
}

// putFrom sends the face from offset from in chunks of 4 KiB (a serial frame's) and
// returns the last ack.
func (v *v2Link) putFrom(t *testing.T, data []byte, sha string, from int) face.Ack {
	t.Helper()
	for {
		to := min(from+4096, len(data))
		a := v.put(t, data, sha, from, to)
		if a.Code != 0 || a.Have == len(data) || a.Have != to {
			return a
		}
		from = to
	}
}

func wantAck(t *testing.T, what string, a face.Ack, code, have int) {
	t.Helper()
	if a.Code != code || a.Have != have {
		t.Fatalf("%s: ack %+v, want code %d have %d", what, a, code, have)
	}
}

// PutFace follows the resume rule: the terminal answers what it holds of the face from 0
// without a gap; a chunk anywhere else is ignored; a face held answers its size; the bytes
// held are the bytes sent.
func TestPutFaceResume(t *testing.T) {
	bothTransports(t, Options{Seed: 1}, func(t *testing.T, v *v2Link) {
		data, sha := faceBytes(1, 10000)
		probe := face.Command{Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data)}}
		wantAck(t, "probe", v.do(t, probe), 0, 0)
		wantAck(t, "first chunk", v.put(t, data, sha, 0, 4096), 0, 4096)
		wantAck(t, "first chunk again", v.put(t, data, sha, 0, 4096), 0, 4096)
		wantAck(t, "a chunk after a gap", v.put(t, data, sha, 8192, 10000), 0, 4096)
		wantAck(t, "probe midway", v.do(t, probe), 0, 4096)
		if got := v.term.FaceHave(sha); got != 4096 {
			t.Fatalf("FaceHave %d", got)
		}
		wantAck(t, "second chunk", v.put(t, data, sha, 4096, 8192), 0, 8192)
		last := face.Command{MessageID: "last", Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Offset: 8192, Data: data[8192:]}}
		wantAck(t, "last chunk", v.do(t, last), 0, 10000)
		got, ok := v.term.Face(sha)
		if !ok || !bytes.Equal(got, data) || !reflect.DeepEqual(v.term.Faces(), []string{sha}) {
			t.Fatalf("face held %v, %d bytes, equal %v; faces %v", ok, len(got), bytes.Equal(got, data), v.term.Faces())
		}
		chunks := v.term.Stats().FaceChunks
		wantAck(t, "the last chunk's messageId again", v.do(t, last), 0, 10000)
		wantAck(t, "a face held", v.put(t, data, sha, 0, 4096), 0, 10000)
		s := v.term.Stats()
		if s.FaceChunks != chunks+1 || s.Faces != 1 || s.FaceBytes != 10000 {
			t.Fatalf("stats %+v (chunks before %d)", s, chunks)
		}
		// The bytes are the terminal's own: changing what was sent changes nothing.
		got[0]++
		if again, _ := v.term.Face(sha); !bytes.Equal(again, data) {
			t.Fatal("Face returned the terminal's own slice")
		}
	})
}

// A chunk past the face's size, and a face whose bytes do not hash to its sha256, are
// refused with 22 and the face is discarded.
func TestPutFaceHashAndSize(t *testing.T) {
	bothTransports(t, Options{Seed: 2}, func(t *testing.T, v *v2Link) {
		data, sha := faceBytes(2, 6000)
		wantAck(t, "first chunk", v.put(t, data, sha, 0, 4096), 0, 4096)
		past := face.Command{Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: 4000, Offset: 0, Data: data[:4001]}}
		wantAck(t, "another size starts again, past its size", v.do(t, past), face.CodeFaceHash, 0)
		wantAck(t, "first chunk again", v.put(t, data, sha, 0, 4096), 0, 4096)
		past = face.Command{Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Offset: 4096, Data: append(data[4096:], 0)}}
		a := v.do(t, past)
		wantAck(t, "past the size", a, face.CodeFaceHash, 0)
		if a.Message == "" || v.term.FaceHave(sha) != 0 {
			t.Fatalf("ack %+v, have %d", a, v.term.FaceHave(sha))
		}
		bad := append([]byte(nil), data...)
		bad[5999]++
		wantAck(t, "first chunk", v.put(t, bad, sha, 0, 4096), 0, 4096)
		wantAck(t, "a complete face with another hash", v.put(t, bad, sha, 4096, 6000), face.CodeFaceHash, 0)
		if len(v.term.Faces()) != 0 || v.term.Stats().FaceRejects != 3 {
			t.Fatalf("faces %v, stats %+v", v.term.Faces(), v.term.Stats())
		}
		wantAck(t, "the good face", v.put(t, data, sha, 0, 4096), 0, 4096)
		wantAck(t, "the good face", v.put(t, data, sha, 4096, 6000), 0, 6000)
	})
}

// Persons that refer to a face the terminal does not hold are refused with 21; batches
// are applied person by person, up to the batch the heartbeat announces; capacity gives 23.
func TestFacesAndBatches(t *testing.T) {
	bothTransports(t, Options{Seed: 3, Batch: 3, Capacity: 4}, func(t *testing.T, v *v2Link) {
		if h := v.heartbeat(t); h.Batch != 3 || h.Capacity != 4 || h.BatchSize() != 3 {
			t.Fatalf("heartbeat %+v", h)
		}
		data, sha := faceBytes(3, 300)
		withFace := func(id string) face.Person {
			p := face.Person{ID: id, Face: face.FaceRef{SHA256: sha, Size: len(data), Kind: face.FaceTemplate}}
			p.Rev = face.PersonRecordRev(&p).String()
			return p
		}
		if a := v.do(t, face.Command{Op: face.AddPerson, Person: withFace("1")}); a.Code != face.CodeFaceMissing || a.Message == "" {
			t.Fatalf("AddPerson without its face: %+v", a)
		}
		wantAck(t, "the face", v.put(t, data, sha, 0, len(data)), 0, len(data))
		if a := v.do(t, face.Command{Op: face.AddPerson, Person: withFace("1")}); a.Code != 0 {
			t.Fatalf("AddPerson with its face: %+v", a)
		}
		other := withFace("3")
		other.Face.SHA256 = face.FaceSHA256([]byte("another face"))
		other.Rev = face.PersonRecordRev(&other).String()
		batch := face.Command{MessageID: "batch-1", Op: face.AddPersons, Persons: []face.Person{withFace("2"), other, {ID: "4"}}}
		a := v.do(t, batch)
		want := []face.Result{{ID: "2"}, {ID: "3", Code: face.CodeFaceMissing}, {ID: "4"}}
		if a.Code != 0 || !reflect.DeepEqual(a.Results, want) {
			t.Fatalf("AddPersons: %+v", a)
		}
		batches := v.term.Stats().Batches
		if again := v.do(t, batch); again.Code != 0 || !reflect.DeepEqual(again.Results, want) || v.term.Stats().Batches != batches {
			t.Fatalf("AddPersons repeated: %+v, batches %d then %d", again, batches, v.term.Stats().Batches)
		}
		tooMany := face.Command{Op: face.AddPersons, Persons: []face.Person{{ID: "5"}, {ID: "6"}, {ID: "7"}, {ID: "8"}}}
		if a := v.do(t, tooMany); a.Code != BatchTooLargeCode || a.Results != nil {
			t.Fatalf("a batch over the terminal's: %+v", a)
		}
		// Three held, room for one.
		a = v.do(t, face.Command{Op: face.AddPersons, Persons: []face.Person{{ID: "5"}, {ID: "6"}, {ID: "1", Name: "replaced"}}})
		want = []face.Result{{ID: "5"}, {ID: "6", Code: face.CodeCapacity}, {ID: "1"}}
		if a.Code != 0 || !reflect.DeepEqual(a.Results, want) {
			t.Fatalf("AddPersons at capacity: %+v", a)
		}
		if ids := personIDs(v.term.Persons()); ids != "1,2,4,5" {
			t.Fatalf("persons %s", ids)
		}
		// The digest covers the revs as sent, faces included.
		var d face.Digest
		for _, p := range v.term.Persons() {
			r, _ := face.ParseRev(revOf(p))
			d.Toggle(p.ID, r)
		}
		if h := v.heartbeat(t); h.Digest != d.String() || h.Persons != 4 {
			t.Fatalf("heartbeat %+v, digest of the persons %s", h, d)
		}
		v.term.SetBatch(0)
		if a := v.do(t, face.Command{Op: face.AddPersons, Persons: []face.Person{{ID: "9"}}}); a.Code != UnknownOpCode {
			t.Fatalf("AddPersons to a terminal without batches: %+v", a)
		}
		must(t, v.term.SetProtocol(1))
		if a := v.put(t, data, sha, 0, 10); a.Code != UnknownOpCode {
			t.Fatalf("PutFace to a v1 terminal: %+v", a)
		}
		v.term.FactoryReset()
		if len(v.term.Faces()) != 0 || v.term.FaceHave(sha) != 0 {
			t.Fatalf("faces after a factory reset: %v", v.term.Faces())
		}
	})
}

// PersonTime: an AddPersons of n persons is acked no sooner than n×PersonTime.
func TestPersonTime(t *testing.T) {
	v := onSerial(t, strict(t, Options{Seed: 4, Batch: 5, PersonTime: 60 * time.Millisecond}))
	start := time.Now()
	a := v.do(t, face.Command{Op: face.AddPersons, Persons: []face.Person{{ID: "1"}, {ID: "2"}, {ID: "3"}, {ID: "4"}, {ID: "5"}}})
	if took := time.Since(start); a.Code != 0 || took < 300*time.Millisecond {
		t.Fatalf("ack %+v after %v, want at least 300ms", a, took)
	}
}

// A face transfer cut short resumes: the terminal keeps the bytes up to the cut, dies
// before acking, and answers the agent's resend with the have it kept.
func TestCutFaceResumes(t *testing.T) {
	for _, tr := range []string{"mqtt", "serial"} {
		t.Run(tr, func(t *testing.T) {
			o := strict(t, Options{Seed: 5, CutFace: 5000, CrashDowntime: 50 * time.Millisecond})
			v := onSerial
			if tr == "mqtt" {
				v = onMQTT
			}
			l := v(t, o)
			data, sha := faceBytes(5, 10000)
			wantAck(t, "first chunk", l.put(t, data, sha, 0, 4096), 0, 4096)
			cut := face.Command{MessageID: "cut", Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Offset: 4096, Data: data[4096:8192]}}
			must(t, l.l.Send(context.Background(), "d", cut))
			// Back from the crash, the terminal announces itself; only then is the resend heard.
			waitKind(t, l.l, device.Heartbeat)
			wantAck(t, "the cut chunk again", l.do(t, cut), 0, 5000)
			wantAck(t, "the rest", l.putFrom(t, data, sha, 5000), 0, 10000)
			if got, _ := l.term.Face(sha); !bytes.Equal(got, data) {
				t.Fatal("the resumed face differs from the one sent")
			}
			if s := l.term.Stats(); s.FaceCuts != 1 || s.Crashes != 1 {
				t.Fatalf("stats %+v", s)
			}
			// Each face is cut once.
			l.term.DeleteFace(sha)
			wantAck(t, "again", l.putFrom(t, data, sha, 0), 0, 10000)
		})
	}
}

// A serial terminal with a baud rate takes the line's time: 11,520 bytes at 115200 baud
// (11,520 bytes a second) take at least a second each way, on a pty that does not pace.
func TestSerialBaudPacing(t *testing.T) {
	const baud, n = 115200, 11520
	open := func(t *testing.T) (*serial.PTY, *os.File) {
		p, err := serial.OpenPTY()
		if err != nil {
			t.Fatal(err)
		}
		slave, err := os.OpenFile(p.Path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { slave.Close(); p.Close() })
		return p, slave
	}
	payload := bytes.Repeat([]byte{0xFA, 0xCE, 1, 2}, n/4)
	t.Run("write", func(t *testing.T) {
		p, slave := open(t)
		paced := newPacedPort(p.Master, baud)
		got := make(chan []byte, 1)
		go func() {
			b := make([]byte, n)
			_, _ = io.ReadFull(slave, b)
			got <- b
		}()
		start := time.Now()
		if _, err := paced.Write(payload); err != nil {
			t.Fatal(err)
		}
		b := <-got
		if took := time.Since(start); took < time.Second || !bytes.Equal(b, payload) {
			t.Fatalf("%d bytes written in %v (equal %v), want at least 1s", n, took, bytes.Equal(b, payload))
		}
	})
	t.Run("read", func(t *testing.T) {
		p, slave := open(t)
		paced := newPacedPort(p.Master, baud)
		go func() { _, _ = slave.Write(payload) }() // at once: the pty does not pace
		start := time.Now()
		b := make([]byte, n)
		if _, err := io.ReadFull(paced, b); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < time.Second || !bytes.Equal(b, payload) {
			t.Fatalf("%d bytes read in %v, want at least 1s", n, took)
		}
	})
}

// End to end: a terminal at 115200 baud acks a PutFace of 4 KiB no sooner than its frame
// can cross the line.
func TestSerialTerminalHonoursBaud(t *testing.T) {
	v := onSerial(t, strict(t, Options{Seed: 6, Baud: 115200}))
	data, sha := faceBytes(6, 4096)
	cmd := face.Command{MessageID: "p", Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Data: data}}
	frame, err := serial.AppendMessage(nil, serial.KindCommand, &cmd)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantAck(t, "a 4 KiB chunk", v.do(t, cmd), 0, 4096)
	if min := time.Duration(len(frame)) * 10 * time.Second / 115200; time.Since(start) < min {
		t.Fatalf("acked after %v, before the %d-byte frame crossed the line (%v)", time.Since(start), len(frame), min)
	}
}
