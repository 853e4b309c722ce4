package serial

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

var typicalCommand = face.Command{
	MessageID: "EditPerson-951-1494527067538440192",
	Op:        face.AddPerson,
	Person:    face.Person{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z"},
}

var typicalAck = face.Ack{MessageID: "EditPerson-951-1494527067538440192", Code: 0, Message: ""}

func TestFrameFixture(t *testing.T) {
	got, err := AppendFrame(nil, KindAck, []byte{0x80}) // msgp empty map
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0xFA, 0xCE, // SOF
		0x12,       // version 1, kind ack
		0x00, 0x01, // payload length 1
		got[5], // header check (CRC-32C low byte), checked below
		0x80,   // payload
	}
	if !bytes.Equal(got[:7], want) || len(got) != 7+4 {
		t.Fatalf("frame % x", got)
	}
	f, rest, err := ReadFrame(got, 0)
	if err != nil || len(rest) != 0 || f.Kind != KindAck || !bytes.Equal(f.Payload, []byte{0x80}) {
		t.Fatalf("ReadFrame: %+v rest=%d %v", f, len(rest), err)
	}
	for i := range got { // every single-bit flip is detected
		for bit := range 8 {
			bad := bytes.Clone(got)
			bad[i] ^= 1 << bit
			if f, _, err := ReadFrame(bad, 0); err == nil {
				t.Fatalf("bit %d of byte %d flipped, frame accepted: %+v", bit, i, f)
			}
		}
	}
}

func TestAppendMessageMatchesAppendFrame(t *testing.T) {
	payload, _ := typicalCommand.AppendMsg(nil)
	a, _ := AppendFrame([]byte("x"), KindCommand, payload)
	b, err := AppendMessage([]byte("x"), KindCommand, &typicalCommand)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("AppendMessage % x\nAppendFrame   % x (%v)", b, a, err)
	}
	bad := face.Command{MessageID: "m"}
	if out, err := AppendMessage([]byte("x"), KindCommand, &bad); !errors.Is(err, face.ErrInvalid) || string(out) != "x" {
		t.Fatalf("invalid command framed: %q %v", out, err)
	}
}

func TestReadFrameRejectsOversize(t *testing.T) {
	fr, _ := AppendFrame(nil, KindCommand, make([]byte, 100))
	if _, rest, err := ReadFrame(fr, 99); !errors.Is(err, ErrTooLarge) || len(rest) != len(fr)-1 {
		t.Fatalf("oversize: %v rest=%d", err, len(rest))
	}
}

// stream builds garbage + frames + cut frames and checks the decoder recovers every intact
// frame, fed in random splits (the seed is printed; set FRAME_SEED to replay).
func TestDecoderResyncRandomSplits(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var stream []byte
	var want [][]byte
	for i := range 200 {
		payload := make([]byte, rng.IntN(300))
		for j := range payload {
			payload[j] = byte(rng.IntN(256))
		}
		fr, _ := AppendFrame(nil, KindHeartbeat, payload)
		switch i % 5 {
		case 1: // garbage before, including SOF bytes
			g := make([]byte, rng.IntN(40))
			for j := range g {
				g[j] = []byte{0xFA, 0xCE, 0x00, 0x13, 0xFF}[rng.IntN(5)]
			}
			stream = append(stream, g...)
		case 2: // a frame cut short, then the intact one
			stream = append(stream, fr[:rng.IntN(len(fr)-1)+1]...)
		case 3: // a corrupt frame
			bad := bytes.Clone(fr)
			bad[rng.IntN(len(bad)-2)+2] ^= 0x40
			stream = append(stream, bad...)
		}
		stream = append(stream, fr...)
		want = append(want, payload)
	}
	d := Decoder{FrameTimeout: time.Nanosecond} // fires only in the final drain
	var got [][]byte
	now := time.Unix(0, 0)
	for len(stream) > 0 {
		n := min(len(stream), 1+rng.IntN(64))
		d.Write(stream[:n], now)
		stream = stream[n:]
		for {
			f, _, err := d.Next(now)
			if err == ErrIncomplete {
				break
			}
			if err == nil {
				got = append(got, bytes.Clone(f.Payload))
			}
		}
	}
	for { // a bogus header near the end may claim bytes that never come: the timeout ends it
		f, _, err := d.Next(now.Add(time.Second))
		if err == ErrIncomplete {
			break
		}
		if err == nil {
			got = append(got, bytes.Clone(f.Payload))
		}
	}
	// A cut frame or a corrupt one may swallow the next intact frame only when its declared
	// length spans it and the checksum fails; the rescan from SOF+1 then finds it. So every
	// intact frame must come out, in order, and nothing else.
	if len(got) != len(want) {
		t.Fatalf("got %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

func TestDecoderCutFrameTimeout(t *testing.T) {
	d := Decoder{FrameTimeout: 100 * time.Millisecond}
	fr, _ := AppendFrame(nil, KindAck, []byte{0x80})
	t0 := time.Unix(100, 0)
	d.Write(fr[:5], t0) // the terminal died mid-frame
	if _, _, err := d.Next(t0.Add(50 * time.Millisecond)); err != ErrIncomplete {
		t.Fatalf("before the timeout: %v", err)
	}
	if _, skipped, err := d.Next(t0.Add(100 * time.Millisecond)); err != ErrCutFrame || skipped != 1 {
		t.Fatalf("after the timeout: %v skipped=%d", err, skipped)
	}
	for { // the rest of the cut frame is garbage now
		if _, _, err := d.Next(t0.Add(time.Second)); err == ErrIncomplete {
			break
		}
	}
	d.Write(fr, t0.Add(2*time.Second))
	if f, _, err := d.Next(t0.Add(2 * time.Second)); err != nil || f.Kind != KindAck {
		t.Fatalf("frame after a cut one: %v", err)
	}
}

func TestFrameAllocs(t *testing.T) {
	// msgp asks for Msgsize() bytes of room up front, an upper bound (318 bytes for this
	// 147-byte command, counting the keys of the face fields it leaves out).
	buf := make([]byte, 0, 512)
	cmd := typicalCommand
	allocs := testing.AllocsPerRun(100, func() {
		fr, err := AppendMessage(buf[:0], KindCommand, &cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadFrame(fr, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per encode+decode", allocs)
	}
}

func FuzzDecoder(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.bin"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		d := Decoder{MaxPayload: 512, FrameTimeout: time.Millisecond}
		now := time.Unix(0, 0)
		step := int(split)%32 + 1
		for len(b) > 0 {
			n := min(step, len(b))
			d.Write(b[:n], now)
			b = b[n:]
			for {
				fr, _, err := d.Next(now)
				if err == ErrIncomplete {
					break
				}
				if err != nil {
					continue
				}
				if len(fr.Payload) > 512 {
					t.Fatalf("payload of %d bytes passed the bound", len(fr.Payload))
				}
				if _, err := fr.Decode(); err != nil {
					var fe *face.Error
					if !errors.As(err, &fe) {
						t.Fatalf("unclassified decode error %v", err)
					}
				}
			}
			if d.Buffered() > 512+Overhead+32 {
				t.Fatalf("decoder holds %d bytes", d.Buffered())
			}
		}
		for { // the timeout drains whatever is left
			if _, _, err := d.Next(now.Add(time.Second)); err == ErrIncomplete {
				break
			}
		}
		if d.Buffered() > 1 {
			t.Fatalf("%d bytes stuck after the frame timeout", d.Buffered())
		}
	})
}
