package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

func TestStates(t *testing.T) {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + b.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	st := wire.DeviceState{DeviceID: "d1", Online: true, QueueDepth: 4, InFlight: "m", Sent: 10, Succeeded: 9,
		Failed: 1, Persons: 33, InSync: true, Firmware: "fw-9", LastHeartbeat: time.Now().UnixMilli(), LastError: "refused by the device: code 17"}
	v, _ := st.MarshalMsg(nil)
	if _, err := c.Set(ctx, "faceagent/g/devices/d1", v, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()

	var out, errOut bytes.Buffer
	code := run(ctx, []string{"states", "-url", "mqtt://" + b.Addr(), "-gateway", "g", "d1", "d2"}, nil, &out, &errOut, false)
	if code != 1 {
		t.Errorf("exit %d (d2 has no state: want 1)\n%s%s", code, out.String(), errOut.String())
	}
	d1 := summaryRow(t, out.String(), "d1")
	if !strings.HasPrefix(d1, "true 4+1 10 9 1 0 33 yes false fw-9 ") || !strings.HasSuffix(d1, "refused by the device: code 17") {
		t.Errorf("d1 row %q", d1)
	}
	if !strings.Contains(summaryRow(t, out.String(), "d2"), "not found") {
		t.Errorf("d2 row:\n%s", out.String())
	}

	// -config takes the gateway, the devices and the broker from the agent's file.
	cfg := filepath.Join(t.TempDir(), "a.toml")
	os.WriteFile(cfg, []byte("[agent]\ngateway_id = \"g\"\n[broker]\nlisten = \""+b.Addr()+"\"\n[[devices]]\nid = \"d1\"\n"), 0o600)
	out.Reset()
	if code := run(ctx, []string{"states", "-config", cfg}, nil, &out, &errOut, false); code != 0 {
		t.Errorf("-config: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if code := run(ctx, []string{"states"}, nil, &out, &errOut, false); code != 2 {
		t.Errorf("no devices: exit %d", code)
	}
}
