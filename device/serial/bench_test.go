package serial

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
)

func BenchmarkAppendMessageCommand(b *testing.B) {
	buf := make([]byte, 0, 256)
	cmd := typicalCommand
	fr, _ := AppendMessage(nil, KindCommand, &cmd)
	b.SetBytes(int64(len(fr)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendMessage(buf[:0], KindCommand, &cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFrameCommand(b *testing.B) {
	fr, _ := AppendMessage(nil, KindCommand, &typicalCommand)
	b.SetBytes(int64(len(fr)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ReadFrame(fr, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// wireRoundTrip is the time a command frame and its ack frame take on a UART at baud with
// 8N1 framing (10 bits a byte).
func wireRoundTrip(baud int) (cmdBytes, ackBytes int, d time.Duration) {
	cmd, _ := AppendMessage(nil, KindCommand, &typicalCommand)
	ack, _ := AppendMessage(nil, KindAck, &typicalAck)
	bits := (len(cmd) + len(ack)) * 10
	return len(cmd), len(ack), time.Duration(bits) * time.Second / time.Duration(baud)
}

// BenchmarkWireSize reports the frame sizes of a typical AddPerson command and its ack and
// the command rate one terminal could reach on a 115200-baud line if the link cost nothing.
func BenchmarkWireSize(b *testing.B) {
	cmdBytes, ackBytes, rt := wireRoundTrip(115200)
	for b.Loop() {
	}
	b.ReportMetric(float64(cmdBytes), "cmd-frame-bytes")
	b.ReportMetric(float64(ackBytes), "ack-frame-bytes")
	b.ReportMetric(float64(rt.Microseconds())/1000, "wire-ms/roundtrip")
	b.ReportMetric(float64(time.Second)/float64(rt), "max-cmds/s@115200")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLinkRoundTripPTY sends a command through the link over a pty, lets a minimal
// terminal answer with a ready-made ack frame, and waits for the Ack event. The process CPU
// time per round trip (getrusage: link, pty syscalls, and the tiny echo terminal together,
// so an upper bound on the link's own) is compared with the wire time of the same exchange
// at 115200 baud.
func BenchmarkLinkRoundTripPTY(b *testing.B) {
	p, err := OpenPTY()
	if err != nil {
		b.Fatal(err)
	}
	ackFrame, _ := AppendMessage(nil, KindAck, &typicalAck)
	echoDone := make(chan struct{})
	go func() { // the terminal: one ack per command frame
		defer close(echoDone)
		var d Decoder
		buf := make([]byte, 1024)
		for {
			n, err := p.Master.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			d.Write(buf[:n], now)
			for {
				_, _, err := d.Next(now)
				if err == ErrIncomplete {
					break
				}
				if err == nil {
					p.Master.Write(ackFrame)
				}
			}
		}
	}()
	l, err := New(Config{Port: p.Path, DeviceID: "2042253"})
	if err != nil {
		b.Fatal(err)
	}
	for ev := range l.Events() {
		if ev.Kind == device.Up {
			break
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if err := l.Send(ctx, "2042253", typicalCommand); err != nil {
			b.Fatal(err)
		}
		for ev := range l.Events() {
			if ev.Kind == device.Ack {
				break
			}
		}
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	l.Close()
	p.Close()
	<-echoDone
	perOp := cpu / time.Duration(b.N)
	_, _, wire := wireRoundTrip(115200)
	b.ReportMetric(float64(perOp.Nanoseconds())/1000, "cpu-µs/roundtrip")
	b.ReportMetric(100*float64(perOp)/float64(wire), "cpu-%-of-115200-wire")
}
