package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelpDocumentsEveryKnob(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), []string{"--help"}, nil, io.Discard, &out); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var c config
	newFlags(io.Discard, &c).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "-"+f.Name) {
			t.Errorf("--help does not mention -%s", f.Name)
		}
	})
	for _, want := range []string{"Exit status", "strict", "uniform:", "Summary columns", "-protocol 1", "replace ID", "-stdin"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-ack-loss", "2"}, {"-transport", "carrier-pigeon"}, {"-ack-latency", "soon"},
		{"-refuse-code", "0"}, {"-log", "loud"}, {"stray"}, {"-no-such-flag"},
		{"-protocol", "3"}, {"-protocol", "0"}, {"-capacity", "-1"},
		{"-batch", "-1"}, {"-batch", "1001"}, {"-person-time", "-1s"}, {"-cut-face", "-1"}, {"-baud", "0"},
	} {
		var errb bytes.Buffer
		if code := Run(context.Background(), args, nil, io.Discard, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, stderr %s", args, code, errb.String())
		}
	}
}

// start runs facesim in the background and returns what it started.
func start(t *testing.T, args ...string) (ready, context.CancelFunc, chan int, *testutil.SyncBuffer, *testutil.SyncBuffer) {
	return startWithStdin(t, nil, args...)
}

// startWithStdin is start with facesim's standard input.
func startWithStdin(t *testing.T, stdin io.Reader, args ...string) (ready, context.CancelFunc, chan int, *testutil.SyncBuffer, *testutil.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testutil.SyncBuffer
	readyc := make(chan ready, 1)
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, stdin, &stdout, &stderr, func(r ready) { readyc <- r }) }()
	select {
	case r := <-readyc:
		return r, cancel, done, &stdout, &stderr
	case code := <-done:
		cancel()
		t.Fatalf("facesim exited %d: %s", code, stderr.String())
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("facesim not ready")
	}
	return ready{}, nil, nil, nil, nil
}

func waitAck(t *testing.T, l device.Link, id string) device.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-l.Events():
			if ev.Kind == device.Ack && ev.Ack.MessageID == id {
				return ev
			}
		case <-timeout:
			t.Fatalf("no ack for %s", id)
		}
	}
}

func TestEmbeddedBrokerWithALink(t *testing.T) {
	r, cancel, done, stdout, _ := start(t, "-listen", "127.0.0.1:0", "-n", "2", "-summary", "20ms", "-heartbeat", "50ms", "-strict")
	l, err := mqttlink.New(mqttlink.Config{URL: r.BrokerURL})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for ev := range l.Events() {
		if ev.Kind == device.Up {
			break
		}
	}
	cmd := face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Li Lei"}}
	if err := l.Send(context.Background(), "sim-2", cmd); err != nil {
		t.Fatal(err)
	}
	if ev := waitAck(t, l, "m-1"); ev.DeviceID != "sim-2" || !ev.Ack.OK() {
		t.Fatalf("ack %s", ev)
	}
	if ps := r.Fleet.Terminal("sim-2").Persons(); len(ps) != 1 || ps[0].ID != "951" {
		t.Fatalf("whitelist %v", ps)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d", code)
	}
	out := stdout.String()
	for _, want := range []string{"embedded broker listening on", "2 terminals ready", "sim-1", "sim-2", "persons", "viol"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

func TestSerialStrictViolationExitsThree(t *testing.T) {
	dir := t.TempDir()
	r, cancel, done, _, stderr := start(t, "-transport", "serial", "-n", "1", "-link-dir", dir,
		"-strict", "-ack-latency", "1s", "-summary", "0", "-heartbeat", "0")
	path := filepath.Join(dir, "sim-1")
	if r.Ports["sim-1"] != path {
		t.Fatalf("ports %v", r.Ports)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("link: %v", err)
	}
	l, err := serial.New(serial.Config{Port: path, DeviceID: "sim-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for ev := range l.Events() {
		if ev.Kind == device.Up {
			break
		}
	}
	ctx := context.Background()
	c1 := face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "1"}}
	c2 := face.Command{MessageID: "m-2", Op: face.AddPerson, Person: face.Person{ID: "2"}}
	if err := l.Send(ctx, "sim-1", c1); err != nil {
		t.Fatal(err)
	}
	if err := l.Send(ctx, "sim-1", c2); err != nil { // without waiting for m-1's ack
		t.Fatal(err)
	}
	waitAck(t, l, "m-2")
	cancel()
	if code := <-done; code != exitViolation {
		t.Fatalf("exit %d, want %d", code, exitViolation)
	}
	if !strings.Contains(stderr.String(), "received m-2") {
		t.Fatalf("stderr: %s", stderr.String())
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("symlink left behind: %v", err)
	}
}

// The face and batch knobs reach the terminals: a paced serial terminal announces its
// batch, cuts a face's first transfer where told, takes the resend from there, and the
// summary counts the face it holds.
func TestFaceKnobs(t *testing.T) {
	dir := t.TempDir()
	r, cancel, done, stdout, _ := start(t, "-transport", "serial", "-n", "1", "-link-dir", dir, "-strict",
		"-pace", "-baud", "115200", "-batch", "2", "-person-time", "1ms", "-cut-face", "100",
		"-crash-downtime", "50ms", "-summary", "0", "-heartbeat", "0")
	l, err := serial.New(serial.Config{Port: r.Ports["sim-1"], DeviceID: "sim-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitEvent(t, l, device.Up)
	r.Fleet.Terminal("sim-1").SendHeartbeat()
	if ev := waitEvent(t, l, device.Heartbeat); ev.Heartbeat.Batch != 2 {
		t.Fatalf("heartbeat %+v", ev.Heartbeat)
	}
	data := bytes.Repeat([]byte("face"), 75)
	sha := face.FaceSHA256(data)
	put := face.Command{MessageID: "p-1", Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Data: data}}
	ctx := context.Background()
	if err := l.Send(ctx, "sim-1", put); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l, device.Heartbeat) // back from the cut
	if err := l.Send(ctx, "sim-1", put); err != nil {
		t.Fatal(err)
	}
	if ev := waitAck(t, l, "p-1"); ev.Ack.Code != 0 || ev.Ack.Have != 100 {
		t.Fatalf("after the cut: %+v", ev.Ack)
	}
	rest := face.Command{MessageID: "p-2", Op: face.PutFace, Face: face.FaceChunk{SHA256: sha, Size: len(data), Offset: 100, Data: data[100:]}}
	if err := l.Send(ctx, "sim-1", rest); err != nil {
		t.Fatal(err)
	}
	if ev := waitAck(t, l, "p-2"); ev.Ack.Have != len(data) {
		t.Fatalf("the rest: %+v", ev.Ack)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d", code)
	}
	// The summary at exit: faces 1, cut 1.
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	head, row := strings.Fields(lines[len(lines)-2]), strings.Fields(lines[len(lines)-1])
	col := func(name string) string {
		for i, h := range head {
			if h == name {
				return row[i-1] // the time heads the header only
			}
		}
		return ""
	}
	if col("faces") != "1" || col("cut") != "1" {
		t.Fatalf("summary:\n%s", stdout.String())
	}
}

func waitEvent(t *testing.T, l device.Link, kind device.EventKind) device.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-l.Events():
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}
