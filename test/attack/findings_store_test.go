package attack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// TestAttackSessionsJournalDiskFull fills the tmpfs under data_dir while the outbox is
// idle (the back office paused and its results delivered), so that only the broker's
// sessions journal meets the full disk: a QoS 1 message for a kept session that is away.
// Once the space is back the journal must take records again without a restart: the
// next such message is acknowledged and reaches the session, and the back office, whose
// results go through the same journal, gets every result.
func TestAttackSessionsJournalDiskFull(t *testing.T) {
	s := start(t, diskFull)
	runAttack(t, s, attack{name: "sessions-disk-full", sockets: 2, logBudget: 64 << 10, dataBudget: 20 << 20, quiet: -1,
		run: func(t *testing.T, s *system) {
			s.tr.bo.pause()
			defer s.tr.bo.resume()
			s.tr.bo.waitDrained(t)
			away := s.mustConnect(t, clientOpts{id: "away", sessionExpiry: 3600})
			if code, err := away.subscribe("away/#"); err != nil || code >= 0x80 {
				t.Fatalf("SUBACK 0x%02x %v", code, err)
			}
			away.close()

			filler := filepath.Join(s.dataView, "filler")
			fill(t, filler)
			defer os.Remove(filler)
			// 256 KiB: more than the slack in the last page of the journal's file, which
			// a small record would fit in without the file system giving a block.
			big := make([]byte, 256<<10)
			if pub, _, err := s.connect(t, clientOpts{id: "publisher"}); err == nil {
				code, err := pub.publish("away/full", big, nil)
				t.Logf("QoS 1 to a kept session, disk full: PUBACK 0x%02x %v", code, err)
				pub.close()
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}

			deadline := time.Now().Add(resultDeadline)
			for {
				pub, code, err := s.connect(t, clientOpts{id: "publisher"})
				if err == nil {
					code, err = pub.publish("away/after", big, nil)
					pub.close()
					if err == nil && code < 0x80 {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after the space came back, a QoS 1 message for a kept session is still refused: 0x%02x %v",
						resultDeadline, code, err)
				}
				s.tr.bo.wait(200 * time.Millisecond)
			}
			back := s.mustConnect(t, clientOpts{id: "away", sessionExpiry: 3600, resume: true})
			for {
				select {
				case p := <-back.msgs:
					if p.Topic == "away/after" {
						return
					}
				case <-time.After(waitFor):
					t.Fatal("the kept session never got the message acknowledged for it")
				}
			}
		}})
}

// TestAttackForeignFencingToken: an anonymous client (the default setup lets anyone
// write any key) SETs the agent's device state key with a fencing token of its own. The
// key is then fenced, and the agent's writes, which carry no token, were refused for good
// ("a fencing token is required"). The agent's own keys must come back to it: its next
// state write lands.
func TestAttackForeignFencingToken(t *testing.T) {
	s := start(t, anonymous)
	runAttack(t, s, attack{name: "foreign-fencing-token", sockets: 1, logBudget: 16 << 10, run: func(t *testing.T, s *system) {
		mc := s.storeClient(t, clientOpts{id: "fencer"})
		key := "faceagent/" + gateway + "/devices/t1"
		reply, code, err := mc.request(command("SET", key, "fenced"), storeReq{ft: mc.clock.Now().String()})
		if err != nil || code >= 0x80 {
			t.Fatalf("SET with a fencing token: PUBACK 0x%02x %v", code, err)
		}
		t.Logf("SET %s with a fencing token: %q", key, reply)
		// The terminal gets a command every few tens of milliseconds: its state changes
		// and the agent writes it at most store.write_interval (200 ms) later.
		deadline := time.Now().Add(resultDeadline)
		for {
			got := mc.mustDo("GET", key)
			if !strings.Contains(got, "fenced") && strings.HasPrefix(got, "$") && got != "$-1\r\n" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v later the agent's key still holds %q", resultDeadline, got)
			}
			s.tr.bo.wait(100 * time.Millisecond)
		}
	}})
}

// notifyQueueBytes is the most a connection's KEYNOTIFY queue holds before the broker
// disconnects it (agent/broker doc.go: 1024 notifications or 16 MiB).
const notifyQueueBytes = 16 << 20

// TestAttackNonAckingWatcher registers KEYNOTIFY on a key with a Receive Maximum of
// 65535, reads every notification and acknowledges none, while another client SETs the
// key with 60 KiB values, attackVolume bytes in all. What the broker holds for the
// watcher must stay within its notification queue's bound.
func TestAttackNonAckingWatcher(t *testing.T) {
	s := start(t, anonymous)
	runAttack(t, s, attack{name: "non-acking-watcher", sockets: 2, logBudget: 16 << 10, rssGrowth: 2*notifyQueueBytes + gcRoom,
		run: func(t *testing.T, s *system) {
			w := s.rawDial(t)
			pk := connectPacket("watcher")
			pk.Properties.ReceiveMaximum = 65535
			if code, err := w.connack(pk); err != nil || code != 0 {
				t.Fatalf("CONNACK 0x%02x %v", code, err)
			}
			if err := w.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
				TopicName: sswire.InvokeTopic, Payload: command("KEYNOTIFY", "hot"),
				Properties: packets.Properties{ResponseTopic: "clients/watcher/r", CorrelationData: []byte("0000000000000001"),
					User: []packets.UserProperty{{Key: "__ts", Val: timestamp()}}}}); err != nil {
				t.Fatal(err)
			}
			read := make(chan int, 1)
			go func() { // reads everything, acknowledges nothing
				n := 0
				for {
					if _, _, err := w.read(time.Minute); err != nil {
						read <- n
						return
					}
					n++
				}
			}()
			setter := s.storeClient(t, clientOpts{id: "setter"})
			value := strings.Repeat("v", 60<<10)
			for i := range attackVolume / len(value) {
				if got := setter.mustDo("SET", "hot", value); got != "+OK\r\n" {
					t.Fatalf("SET %d: %q", i, got)
				}
			}
			_ = w.conn.Close()
			t.Logf("the watcher read %d packets", <-read)
		}})
}
