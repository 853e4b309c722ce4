package mqttlink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// BenchmarkRoundTrip is one command to one simulated terminal (its own paho connection to
// the same in-process broker) and the wait for its ack: the ceiling of a one-in-flight
// dispatcher per terminal on local MQTT. Both link modes run in the same invocation.
func BenchmarkRoundTrip(b *testing.B) {
	for _, mode := range []string{"inline", "paho"} {
		b.Run(mode, func(b *testing.B) {
			srv, url := startBroker(b)
			cfg := Config{Bus: srv}
			if mode == "paho" {
				cfg = Config{URL: url}
			}
			l, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			for ev := range l.Events() {
				if ev.Kind == device.Up {
					break
				}
			}
			f, err := sim.StartMQTT(url, []string{"bench"}, sim.Options{Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := f.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				cmd := face.Command{MessageID: fmt.Sprint("m-", i), Op: face.AddPerson, Person: face.Person{ID: "951"}}
				if err := l.Send(context.Background(), "bench", cmd); err != nil {
					b.Fatal(err)
				}
				for ev := range l.Events() {
					if ev.Kind == device.Ack && ev.Ack.MessageID == cmd.MessageID {
						break
					}
				}
			}
		})
	}
}
