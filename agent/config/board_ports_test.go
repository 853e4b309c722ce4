package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/boards"
)

// Serial devices without a port take the board's default ports in the order they appear;
// explicit ports win and are not handed out again; running out names the device and board.
func TestBoardSerialPorts(t *testing.T) {
	const head = "[agent]\ngateway_id = \"gw\"\nboard = \"b\"\n[upstream]\nurl = \"mqtt://127.0.0.1:1883\"\n" // lines 1-5
	serial := func(id, port string) string {
		s := "[[devices]]\nid = \"" + id + "\"\ntransport = \"serial\"\n"
		if port != "" {
			s += "port = \"" + port + "\"\n"
		}
		return s
	}
	mqtt := func(id string) string { return "[[devices]]\nid = \"" + id + "\"\n" }
	twoPorts := []string{"/dev/serial0", "/dev/ttyUSB0"}
	tests := []struct {
		name    string
		ports   []string
		devices string
		want    []string // each device's port, in order
		wantErr string
	}{
		{"first serial device takes the first port", twoPorts,
			serial("s1", ""), []string{"/dev/serial0"}, ""},
		{"in order of appearance, mqtt devices skipped", twoPorts,
			mqtt("m1") + serial("s1", "") + mqtt("m2") + serial("s2", ""),
			[]string{"", "/dev/serial0", "", "/dev/ttyUSB0"}, ""},
		{"explicit ports win", twoPorts,
			serial("s1", "/dev/ttyACM0") + serial("s2", ""),
			[]string{"/dev/ttyACM0", "/dev/serial0"}, ""},
		{"a port named explicitly later is not handed out", twoPorts,
			serial("s1", "") + serial("s2", "/dev/serial0"),
			[]string{"/dev/ttyUSB0", "/dev/serial0"}, ""},
		{"more serial devices than ports", twoPorts,
			serial("s1", "") + serial("s2", "") + serial("s3", ""), nil,
			`f.toml:12: devices[2].port: device "s3": board "b" has 2 default serial ports (/dev/serial0, /dev/ttyUSB0), all taken by earlier devices or explicit ports; set port`},
		{"the last port taken explicitly", twoPorts,
			serial("s1", "/dev/ttyUSB0") + serial("s2", "") + serial("s3", ""), nil,
			`f.toml:13: devices[2].port: device "s3": board "b" has 2 default serial ports (/dev/serial0, /dev/ttyUSB0), all taken by earlier devices or explicit ports; set port`},
		{"a board without serial ports", nil,
			serial("s1", ""), nil,
			`f.toml:6: devices[0].port: device "s1": board "b" has no default serial ports; set port`},
		{"no serial devices", twoPorts,
			mqtt("m1"), []string{""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &Options{LookupEnv: noEnv,
				Board:            func(string) ([]byte, error) { return []byte("[agent]\n"), nil },
				BoardSerialPorts: func(string) ([]string, error) { return tt.ports, nil }}
			c, err := Parse("f.toml", []byte(head+tt.devices), opts)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error\n%v\nwant\n%s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range c.Devices {
				got = append(got, d.Port)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("ports %q, want %q", got, tt.want)
			}
		})
	}
}

// Without a board a serial device still needs its port; a failing port lookup names the board key.
func TestBoardSerialPortsEdges(t *testing.T) {
	src := "[agent]\ngateway_id = \"gw\"\n[upstream]\nurl = \"mqtt://h:1\"\n[[devices]]\nid = \"s1\"\ntransport = \"serial\"\n"
	_, err := Parse("f.toml", []byte(src), testOpts)
	if want := `f.toml:5: devices[0].port: required with transport = "serial" (e.g. "/dev/ttyS1")`; err == nil || err.Error() != want {
		t.Fatalf("no board: %v, want %s", err, want)
	}
	boom := errors.New("ports unavailable")
	opts := &Options{LookupEnv: noEnv,
		Board:            func(string) ([]byte, error) { return []byte("[agent]\n"), nil },
		BoardSerialPorts: func(string) ([]string, error) { return nil, boom }}
	_, err = Parse("f.toml", []byte(strings.Replace(src, "[agent]\n", "[agent]\nboard = \"b\"\n", 1)), opts)
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "f.toml:2: agent.board: ") {
		t.Fatalf("port lookup failure: %v", err)
	}
}

// The real profiles: rpi4-arm64's ports go to serial devices in order, and a third one errs.
func TestBoardSerialPortsFromBoardsPackage(t *testing.T) {
	p, err := boards.Lookup("rpi4-arm64")
	if err != nil {
		t.Fatal(err)
	}
	src := "[agent]\ngateway_id = \"g\"\nboard = \"rpi4-arm64\"\n[broker]\n"
	for i := range p.SerialPorts {
		src += "[[devices]]\nid = \"s" + string(rune('0'+i)) + "\"\ntransport = \"serial\"\n"
	}
	c, err := Parse("f.toml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range c.Devices {
		if d.Port != p.SerialPorts[i] {
			t.Fatalf("device %d: port %q, want %q", i, d.Port, p.SerialPorts[i])
		}
	}
	src += "[[devices]]\nid = \"extra\"\ntransport = \"serial\"\n"
	if _, err = Parse("f.toml", []byte(src), testOpts); err == nil ||
		!strings.Contains(err.Error(), `device "extra": board "rpi4-arm64" has `) {
		t.Fatalf("one serial device too many: %v", err)
	}
}
