package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// disconnects reports each client id as the broker finishes its disconnect (hooks run in
// order: the session store's OnDisconnect ran before this one's).
type disconnects struct {
	mqtt.HookBase
	ids chan string
}

func (d *disconnects) ID() string                                    { return "test-disconnects" }
func (d *disconnects) Provides(b byte) bool                          { return b == mqtt.OnDisconnect }
func (d *disconnects) OnDisconnect(cl *mqtt.Client, _ error, _ bool) { d.ids <- cl.ID }

func (d *disconnects) wait(t *testing.T, id string) {
	t.Helper()
	for {
		select {
		case got := <-d.ids:
			if got == id {
				return
			}
		case <-time.After(waitFor):
			t.Fatalf("%s did not disconnect", id)
		}
	}
}

// records lists the committed records of b's sessions journal, rendered.
func records(t *testing.T, b *Broker) []string {
	t.Helper()
	if err := b.SyncSessions(); err != nil {
		t.Fatal(err)
	}
	c := b.sessions.commit
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.live {
		out = append(out, describeKey(k))
	}
	return out
}

// TestSessionsThatEndWithTheConnectionWriteNothing: a clean session (3.1.1 clean session,
// MQTT 5 clean start with expiry 0) with a subscription and QoS 1 traffic leaves no record,
// nor does the inline client; a kept session's records go when it ends (expiry 0 at
// disconnect after a resume).
func TestSessionsThatEndWithTheConnectionWriteNothing(t *testing.T) {
	d := &disconnects{ids: make(chan string, 16)}
	b := startBroker(t, Options{DataDir: t.TempDir()}, d)
	if err := b.Server().Subscribe("inline/#", 1, func(*mqtt.Client, packets.Subscription, packets.Packet) {}); err != nil {
		t.Fatal(err)
	}
	terminal := dial(t, b.Addr(), "terminal", dialOptions{noSubscribe: true, subscribe: []string{"tasks/#"}})
	for i := range 5 {
		if err := b.Server().Publish("tasks/1", []byte(fmt.Sprint(i)), false, 1); err != nil {
			t.Fatal(err)
		}
		terminal.next()
	}
	if err := b.Server().Publish("inline/x", []byte("x"), true, 1); err != nil { // retained: stored
		t.Fatal(err)
	}
	terminal.close()
	d.wait(t, "terminal")
	if got := records(t, b); len(got) != 1 || !strings.HasPrefix(got[0], "R ") {
		t.Fatalf("records after a clean session: %v, want only the retained message", got)
	}
	if n := b.sessions.commit.j.Stats().Records; n != 1 {
		t.Fatalf("%d journal records written, want 1 (the retained message)", n)
	}

	kept := dial(t, b.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}})
	if got := records(t, b); len(got) != 3 {
		t.Fatalf("records of a kept session: %v", got)
	}
	kept.close()
	d.wait(t, "back-office")
	if got := records(t, b); len(got) != 3 {
		t.Fatalf("records after a kept session left: %v", got)
	}
	f := false
	resumed := dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, noSubscribe: true}) // expiry 0 now
	resumed.close()
	d.wait(t, "back-office")
	if got := records(t, b); len(got) != 1 {
		t.Fatalf("records after the session ended: %v, want the retained message", got)
	}
}

// TestLegacySessionsFileIsNamedNotRead: a bbolt sessions file of an earlier release is
// reported once, by name, and left in place.
func TestLegacySessionsFileIsNamedNotRead(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, legacySessionsFile)
	if err := os.WriteFile(legacy, []byte("not read"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b := startBroker(t, Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), legacy); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("the legacy file is named %d times in:\n%s", n, logs.String())
	}
	if _, err := os.Stat(legacy); err != nil {
		t.Fatal(err)
	}
}

// TestRestoredInflightKeepsPacketIDs: messages in flight when the broker stopped come back
// under the packet ids they were sent with, each its own.
func TestRestoredInflightKeepsPacketIDs(t *testing.T) {
	dir := t.TempDir()
	d := &disconnects{ids: make(chan string, 16)}
	b1 := startBroker(t, Options{DataDir: dir}, d)
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	d.wait(t, "back-office") // offline: every message stays in flight
	const n = 30
	publishInline(t, b1, "results", 0, n)
	cl, ok := b1.Server().Clients.Get("back-office")
	if !ok {
		t.Fatal("no kept session")
	}
	want := map[uint16]string{}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		want[pk.PacketID] = string(pk.Payload)
	}
	if len(want) != n {
		t.Fatalf("%d messages in flight, want %d", len(want), n)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, Options{DataDir: dir})
	cl, ok = b2.Server().Clients.Get("back-office")
	if !ok {
		t.Fatal("session not restored")
	}
	got := map[uint16]string{}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		got[pk.PacketID] = string(pk.Payload)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored in flight %v, want %v", got, want)
	}
}

// TestDamagedSessionsJournalStopsStartup: a record that passes the journal's checksum but
// is no sessions record (another program's, a future version) stops New with an error
// naming the directory, instead of starting with sessions lost; a torn tail does not.
func TestDamagedSessionsJournalStopsStartup(t *testing.T) {
	dir := t.TempDir()
	b1 := startBroker(t, Options{DataDir: dir})
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	sessions := filepath.Join(dir, SessionsDir)
	// A torn tail: half a frame after the last record.
	segs, _ := filepath.Glob(filepath.Join(sessions, "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no journal segment")
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{40, 0, 0, 0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b2 := startBroker(t, Options{DataDir: dir})
	if _, ok := b2.Server().Clients.Get("back-office"); !ok {
		t.Fatal("session lost to a torn tail")
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}

	j, err := journal.Open(sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte{sessionRecordVersion + 1, 0}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if !errors.Is(err, errBadSessionRecord) || !strings.Contains(err.Error(), sessions) {
		t.Fatalf("New = %v, want a bad record error naming %s", err, sessions)
	}
	// The failed New released the journal: it opens again.
	j, err = journal.Open(sessions, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
}
