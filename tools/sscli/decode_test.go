package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// sampleState is the device state behind testdata/device-state.msgp (rewritten by -update).
var sampleState = wire.DeviceState{
	DeviceID: "term-01", Online: true, LastHeartbeat: 1795873200123, LastAck: 1795873201456,
	Firmware: "facesim-1", Persons: 312, QueueDepth: 4, InFlight: "AddPerson-p17-1795873200000000001",
	Sent: 330, Succeeded: 312, Failed: 2, Retries: 7, LastError: `terminal refused: code 17 "refused by facesim"`,
	UpdatedAt: 1795873201500,
}

func sampleStateBytes(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join("testdata", "device-state.msgp")
	if *update {
		b, err := sampleState.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sscli get --decode: the agent's msgp device state printed as JSON, chosen explicitly or
// by the key's shape; anything else stays raw; a value that is no device state is an error.
func TestGetDecode(t *testing.T) {
	storeURL := startStore(t)
	env := map[string]string{"FACEAGENT_SS_URL": storeURL, "FACEAGENT_SS_TIMEOUT": "5s"}
	ctx := context.Background()
	c := connectStore(t, storeURL)
	state := sampleStateBytes(t)
	for key, value := range map[string][]byte{
		"faceagent/gw-01/devices/term-01": state,
		"saved-state":                     state,
		"greeting":                        []byte("hello"),
		"faceagent/gw-01/devices/broken":  []byte("not msgp"),
	} {
		if _, err := c.Set(ctx, key, value, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"get-decode-device-state", []string{"get", "saved-state", "--decode", "device-state"}},
		{"get-decode-auto", []string{"get", "--decode", "auto", "faceagent/gw-01/devices/term-01"}},
		{"get-decode-compact", []string{"get", "--decode", "auto", "--compact", "-v", "faceagent/gw-01/devices/term-01"}},
		{"get-decode-auto-raw", []string{"get", "--decode", "auto", "greeting"}},
		{"get-decode-broken", []string{"get", "--decode", "auto", "faceagent/gw-01/devices/broken"}},
		{"get-decode-bad-format", []string{"get", "--decode", "yaml", "greeting"}},
		{"get-decode-missing", []string{"get", "--decode", "auto", "faceagent/gw-01/devices/nobody"}},
	} {
		golden(t, tc.name, run(ctx, env, "", tc.args...))
	}
}

func TestIsDeviceStateKey(t *testing.T) {
	for key, want := range map[string]bool{
		"faceagent/gw-01/devices/2042253":   true,
		"faceagent/gw-01/devices/":          false,
		"faceagent//devices/x":              false,
		"faceagent/gw-01/devices/x/ack":     false,
		"faceagent/gw-01/config":            false,
		"other/gw-01/devices/x":             false,
		"faceagent/gw-01/devices/x/":        false,
		"faceagent/gw-01/devicesx/2042253":  false,
		"faceagent/gw-01/devices/term-01-a": true,
	} {
		if got := isDeviceStateKey(key); got != want {
			t.Errorf("isDeviceStateKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// FuzzDecodeDeviceState: any bytes either decode or give an error, never a panic, and
// what decodes prints as JSON.
func FuzzDecodeDeviceState(f *testing.F) {
	f.Add(sampleStateBytes(f))
	f.Add([]byte{0x80})
	f.Add([]byte("not msgp"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := decodeDeviceStateJSON(b, true)
		if err == nil && (len(out) < 3 || out[0] != '{' || out[len(out)-1] != '\n') {
			t.Fatalf("decoded to %q", out)
		}
	})
}
