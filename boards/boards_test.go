package boards

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The board list: each must exist with this target and RAM floor.
func TestRequiredBoards(t *testing.T) {
	want := []struct {
		name, target, cpu string
		minRAM            int64
		maxRAM            int64
	}{
		{"rpi0-armv6", "linux/arm/6", "arm1176", 512 << 20, 512 << 20},
		{"rpi3-armv7", "linux/arm/7", "cortex-a7", 1 << 30, 1 << 30},
		{"rpi4-arm64", "linux/arm64", "cortex-a72", 1 << 30, 8 << 30},
		{"imx6ull-armv7", "linux/arm/7", "cortex-a7", 256 << 20, 512 << 20},
		{"rk356x-arm64", "linux/arm64", "cortex-a53", 1 << 30, 8 << 30},
	}
	for _, w := range want {
		p, err := Lookup(w.name)
		if err != nil {
			t.Errorf("Lookup(%q): %v", w.name, err)
			continue
		}
		if p.Target() != w.target {
			t.Errorf("%s: target %s, want %s", w.name, p.Target(), w.target)
		}
		if p.QEMUCPU != w.cpu {
			t.Errorf("%s: qemu_cpu %s, want %s", w.name, p.QEMUCPU, w.cpu)
		}
		if p.RAM < w.minRAM || p.RAM > w.maxRAM {
			t.Errorf("%s: ram %d outside [%d, %d]", w.name, p.RAM, w.minRAM, w.maxRAM)
		}
	}
}

// Every embedded file parses and is sane; the storage rule of the issue holds (SD boards batch,
// eMMC boards sync every append) and no shipped profile gives up durability.
func TestEveryProfileParsesAndIsSane(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.toml")
	if len(all) != len(files) || len(all) < 5 {
		t.Fatalf("loaded %d profiles from %d files, want all of them and at least 5", len(all), len(files))
	}
	for _, p := range all {
		if p.JournalSync == SyncNone {
			t.Errorf("%s: shipped profile must not use journal_sync = none", p.Name)
		}
		sd := strings.HasPrefix(p.Name, "rpi")
		if sd && (p.JournalSync != SyncBatch || p.JournalBatchWindow < time.Millisecond) {
			t.Errorf("%s: SD-card board should batch fsyncs, got %s/%v", p.Name, p.JournalSync, p.JournalBatchWindow)
		}
		if !sd && p.JournalSync != SyncAlways {
			t.Errorf("%s: eMMC board should sync every append, got %s", p.Name, p.JournalSync)
		}
		if p.GOMEMLIMIT < minMemLimit || p.GOMEMLIMIT > p.RAM/2 {
			t.Errorf("%s: gomemlimit %d vs ram %d", p.Name, p.GOMEMLIMIT, p.RAM)
		}
		if n, err := ParseByteSize(p.GOMEMLIMITText); err != nil || n != p.GOMEMLIMIT {
			t.Errorf("%s: GOMEMLIMITText %q does not round-trip (%d, %v)", p.Name, p.GOMEMLIMITText, n, err)
		}
		if len(p.SerialPorts) == 0 {
			t.Errorf("%s: no default serial ports", p.Name)
		}
		if p.DataDir != "/var/lib/faceagent" {
			// The systemd unit's StateDirectory/ReadWritePaths assume this path.
			t.Errorf("%s: data_dir %q differs from the unit's /var/lib/faceagent", p.Name, p.DataDir)
		}
		env := strings.Join(p.Environ(), " ")
		if !strings.Contains(env, "CGO_ENABLED=0") || !strings.Contains(env, "GOARCH="+p.GOARCH) {
			t.Errorf("%s: Environ() = %q", p.Name, env)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("rpi9")
	if !errors.Is(err, ErrUnknownBoard) {
		t.Fatalf("err = %v, want ErrUnknownBoard", err)
	}
	if !strings.Contains(err.Error(), "rpi4-arm64") {
		t.Errorf("error should list the known boards: %v", err)
	}
}

func TestLookupReturnsCopy(t *testing.T) {
	a, _ := Lookup("rpi3-armv7")
	a.SerialPorts[0] = "/dev/changed"
	b, _ := Lookup("rpi3-armv7")
	if b.SerialPorts[0] == "/dev/changed" {
		t.Fatal("mutating a looked-up profile changed the embedded one")
	}
}

func TestNamesSorted(t *testing.T) {
	n := Names()
	if !slices.IsSorted(n) || len(n) < 5 {
		t.Fatalf("Names() = %v", n)
	}
}

const good = `description = "test board"
goos = "linux"
goarch = "arm"
goarm = "7"
qemu_cpu = "cortex-a7"
ram = "512MiB"
serial_ports = ["/dev/ttyS1"]
gomemlimit = "128MiB"
journal_sync = "batch"
journal_batch_window = "10ms"
data_dir = "/var/lib/faceagent"
`

func TestParseGood(t *testing.T) {
	p, err := Parse("t", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if p.GOMEMLIMIT != 128<<20 || p.RAM != 512<<20 || p.JournalBatchWindow != 10*time.Millisecond ||
		p.Target() != "linux/arm/7" || p.GOMEMLIMITText != "128MiB" || p.Broker.StoreMaxBytes != 0 {
		t.Fatalf("%+v", p)
	}
	p, err = Parse("t", []byte(good+"[broker]\nstore_max_bytes = \"16MiB\"\n"))
	if err != nil || p.Broker.StoreMaxBytes != 16<<20 {
		t.Fatalf("store_max_bytes: %+v, %v", p, err)
	}
	p, err = Parse("t", []byte(good+"[faces]\nmax_bytes = \"256MiB\"\n"))
	if err != nil || p.FacesMaxBytes != 256<<20 {
		t.Fatalf("faces max_bytes: %+v, %v", p, err)
	}
	p, err = Parse("t", []byte(good+"[intake]\nmax_whitelist = 4000\n"))
	if err != nil || p.IntakeMaxWhitelist != 4000 {
		t.Fatalf("intake max_whitelist: %+v, %v", p, err)
	}
}

// Each case edits one line of the good profile; the error must name the line and the problem.
func TestParseBad(t *testing.T) {
	cases := []struct {
		name, from, to string
		line           int
		want           string
	}{
		{"unknown key", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\ndata-dir = \"/x\"", 12, `unknown key "data-dir"`},
		{"typo key", `goarm = "7"`, `go_arm = "7"`, 4, `unknown key "go_arm"`},
		{"table", `goos = "linux"`, "goos = \"linux\"\n[extra]\nx = 1", 0, `unknown key`},
		{"syntax", `goarch = "arm"`, `goarch = arm`, 3, `expected value`},
		{"not linux", `goos = "linux"`, `goos = "windows"`, 2, "only linux"},
		{"arch", `goarch = "arm"`, `goarch = "mips"`, 3, "goarch"},
		{"goarm missing", `goarm = "7"`, ``, 0, "goarm"},
		{"goarm 8", `goarm = "7"`, `goarm = "8"`, 4, "goarm"},
		{"goarm on arm64", `goarch = "arm"`, `goarch = "arm64"`, 4, "only meaningful"},
		{"memlimit unit", `gomemlimit = "128MiB"`, `gomemlimit = "128MB"`, 8, "size"},
		{"memlimit small", `gomemlimit = "128MiB"`, `gomemlimit = "8MiB"`, 8, "below"},
		{"memlimit big", `gomemlimit = "128MiB"`, `gomemlimit = "300MiB"`, 8, "half of ram"},
		{"sync", `journal_sync = "batch"`, `journal_sync = "sometimes"`, 9, "always, batch or none"},
		{"no window", `journal_batch_window = "10ms"`, ``, 0, "needs journal_batch_window"},
		{"window long", `journal_batch_window = "10ms"`, `journal_batch_window = "5s"`, 10, "needs journal_batch_window"},
		{"window bad", `journal_batch_window = "10ms"`, `journal_batch_window = "10"`, 10, "duration"},
		{"window with always", `journal_sync = "batch"`, `journal_sync = "always"`, 10, "only meaningful"},
		{"relative dir", `data_dir = "/var/lib/faceagent"`, `data_dir = "var/lib"`, 11, "absolute"},
		{"root dir", `data_dir = "/var/lib/faceagent"`, `data_dir = "/"`, 11, "absolute"},
		{"port", `serial_ports = ["/dev/ttyS1"]`, `serial_ports = ["ttyS1"]`, 7, "/dev/"},
		{"dup port", `serial_ports = ["/dev/ttyS1"]`, `serial_ports = ["/dev/ttyS1", "/dev/ttyS1"]`, 7, "twice"},
		{"missing ram", `ram = "512MiB"`, ``, 0, `missing key "ram"`},
		{"missing cpu", `qemu_cpu = "cortex-a7"`, ``, 0, `missing key "qemu_cpu"`},
		{"bad cpu", `qemu_cpu = "cortex-a7"`, `qemu_cpu = "Cortex A7"`, 5, "qemu_cpu"},
		{"store bytes big", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[broker]\nstore_max_bytes = \"64MiB\"", 13, "quarter of gomemlimit"},
		{"store bytes small", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[broker]\nstore_max_bytes = 1000", 13, "at least 64 KiB"},
		{"faces bytes small", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[faces]\nmax_bytes = \"64KiB\"", 13, "at least 1 MiB"},
		{"whitelist zero", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[intake]\nmax_whitelist = 0", 13, "intake.max_whitelist 0 is out of range (1..10000000)"},
		{"whitelist huge", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[intake]\nmax_whitelist = 10000001", 13, "out of range"},
		{"whitelist typo", `data_dir = "/var/lib/faceagent"`, "data_dir = \"/var/lib/faceagent\"\n[intake]\nmax_whitelists = 10", 13, `unknown key "intake.max_whitelists"`},
		{"empty description", `description = "test board"`, `description = " "`, 1, "description"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Replace(good, c.from, c.to, 1)
			if in == good {
				t.Fatal("case does not change the input")
			}
			_, err := Parse("t", []byte(in))
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *ProfileError", err)
			}
			if !strings.Contains(pe.Msg, c.want) {
				t.Errorf("msg %q does not contain %q", pe.Msg, c.want)
			}
			if c.line != 0 && pe.Line != c.line {
				t.Errorf("line %d, want %d (%v)", pe.Line, c.line, err)
			}
			if !strings.HasPrefix(err.Error(), "boards/t.toml:") {
				t.Errorf("error %q does not start with the file name", err)
			}
		})
	}
}

// A TOML integer is taken as bytes, like GOMEMLIMIT=134217728.
func TestParseIntegerSize(t *testing.T) {
	p, err := Parse("t", []byte(strings.Replace(good, `gomemlimit = "128MiB"`, `gomemlimit = 134217728`, 1)))
	if err != nil || p.GOMEMLIMIT != 128<<20 || p.GOMEMLIMITText != "134217728" {
		t.Fatalf("%+v, %v", p, err)
	}
}

func TestParseBadName(t *testing.T) {
	for _, n := range []string{"", "Rpi", "a/b", "../x", "-x"} {
		if _, err := Parse(n, []byte(good)); err == nil {
			t.Errorf("Parse(%q) accepted a bad name", n)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	ok := map[string]int64{"0": 0, "1": 1, "1B": 1, "2KiB": 2048, "128MiB": 128 << 20, "3GiB": 3 << 30,
		"1TiB": 1 << 40, "9223372036854775807": 1<<63 - 1, "8388607TiB": 8388607 << 40}
	for in, want := range ok {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "B", "MiB", "1MB", "1 MiB", "-1", "+1", "1.5GiB", "8388608TiB", "9223372036854775808", "99999999999999999999"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// The fuzz seeds are the shipped profiles and testdata/*.toml.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"*.toml", "testdata/*.toml"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz", data)
		if err != nil {
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T, want *ProfileError: %v", err, err)
			}
			return
		}
		// Whatever is accepted satisfies the invariants the agent relies on.
		if p.GOOS != "linux" || p.GOMEMLIMIT < minMemLimit || p.GOMEMLIMIT > p.RAM/2 || !strings.HasPrefix(p.DataDir, "/") {
			t.Fatalf("accepted an insane profile: %+v", p)
		}
		if (p.JournalSync == SyncBatch) != (p.JournalBatchWindow > 0) {
			t.Fatalf("batch window %v with policy %s", p.JournalBatchWindow, p.JournalSync)
		}
	})
}

// A board's [broker] bounds must be positive where given.
func TestBrokerBoundsPositive(t *testing.T) {
	base := "description = \"x\"\ngoos = \"linux\"\nqemu_cpu = \"max\"\ngoarch = \"arm64\"\nram = \"64MiB\"\ngomemlimit = \"32MiB\"\njournal_sync = \"always\"\ndata_dir = \"/tmp/fa\"\n"
	p, err := Parse("ok", []byte(base+"[broker]\nmax_clients = 10\nmax_session_bytes = \"1MiB\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Broker != (BrokerBounds{MaxClients: 10, MaxSessionBytes: 1 << 20}) {
		t.Errorf("bounds %+v", p.Broker)
	}
	_, err = Parse("bad", []byte(base+"[broker]\nmax_clients = 0\n"))
	if err == nil || !strings.Contains(err.Error(), "boards/bad.toml:10: broker.max_clients must be positive") {
		t.Errorf("max_clients = 0: %v", err)
	}
}
