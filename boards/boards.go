package boards

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// SyncPolicy says when the journal fsyncs appended records.
type SyncPolicy string

const (
	// SyncAlways fsyncs before every append returns. A group-committing journal still merges
	// appends that arrive while an fsync is running. Right for eMMC, where an fsync is ~1 ms.
	SyncAlways SyncPolicy = "always"
	// SyncBatch leaves at least JournalBatchWindow between one fsync's end and the next
	// batch, so appends arriving meanwhile are fsynced together (an append after a quiet
	// spell goes at once); every append still returns only after the fsync that covers it,
	// so nothing acknowledged can be lost. Right for SD cards, where each fsync is slow and
	// wears the card.
	SyncBatch SyncPolicy = "batch"
	// SyncNone never fsyncs; the kernel writes back when it likes. A power cut loses
	// acknowledged tasks: for tmpfs, tests and benchmarks only. No shipped profile uses it.
	SyncNone SyncPolicy = "none"
)

// Profile is one gateway board's build target and runtime defaults.
type Profile struct {
	Name        string // the file's base name: "rpi4-arm64"
	Description string // one line for humans

	GOOS   string // "linux"
	GOARCH string // "arm", "arm64"
	GOARM  string // "6", "7" when GOARCH is "arm"; "" otherwise

	// QEMUCPU is the CPU model (qemu-arm/qemu-aarch64 -cpu) closest to the board's core that
	// qemu-user emulates; the release tests run the board's binaries on it.
	QEMUCPU string

	RAM         int64    // the smallest RAM the profile is sized for, in bytes
	SerialPorts []string // default serial ports, in the order an operator would try them

	// GOMEMLIMIT is the Go runtime's soft memory limit in bytes (runtime/debug.SetMemoryLimit).
	// GOMEMLIMITText is the same value in the GOMEMLIMIT environment variable's syntax ("128MiB").
	GOMEMLIMIT     int64
	GOMEMLIMITText string

	JournalSync        SyncPolicy
	JournalBatchWindow time.Duration // > 0 only when JournalSync is SyncBatch

	DataDir string // absolute path for the journal and persisted store keys

	// Broker holds the embedded broker's bounds for a board whose memory needs smaller
	// ones than the defaults (which are sized for a 256 MiB soft memory limit); zero
	// fields keep the defaults.
	Broker BrokerBounds

	// FacesMaxBytes is [faces] max_bytes, the disk the face store may take, for a board
	// whose storage needs a smaller budget than the default; 0 keeps the default.
	FacesMaxBytes int64

	// IntakeMaxWhitelist is [intake] max_whitelist, the most persons of one SetWhitelist
	// task, for a board whose memory needs a smaller bound than the default; 0 keeps the
	// default.
	IntakeMaxWhitelist int
}

// BrokerBounds are a board's [broker] bounds (configs/agent.toml documents each); 0 keeps
// the default.
type BrokerBounds struct {
	MaxClients           int   // max_clients
	MaxPendingWriteBytes int64 // max_pending_write_bytes
	MaxSessionBytes      int64 // max_session_bytes
	MaxQueuedBytes       int64 // max_queued_bytes
	MaxRetainedBytes     int64 // max_retained_bytes
	MaxInboundBytes      int64 // max_inbound_bytes
	// StoreMaxBytes is store_max_bytes: the embedded state store's memory bound. At most a
	// quarter of gomemlimit (its keys and, as much again, its queued notifications).
	StoreMaxBytes int64
}

// Target is the build target as "GOOS/GOARCH" or "GOOS/arm/GOARM": "linux/arm/7", "linux/arm64".
func (p Profile) Target() string {
	if p.GOARM != "" {
		return p.GOOS + "/" + p.GOARCH + "/" + p.GOARM
	}
	return p.GOOS + "/" + p.GOARCH
}

// Environ is the environment a `go build` for this board needs: CGO_ENABLED=0, GOOS, GOARCH
// and GOARM (when GOARCH is arm).
func (p Profile) Environ() []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.GOOS, "GOARCH=" + p.GOARCH}
	if p.GOARM != "" {
		env = append(env, "GOARM="+p.GOARM)
	}
	return env
}

//go:embed *.toml
var files embed.FS

var (
	loadOnce sync.Once
	profiles map[string]Profile
	loadErr  error
)

func load() {
	entries, err := files.ReadDir(".")
	if err != nil {
		loadErr = err
		return
	}
	profiles = make(map[string]Profile, len(entries))
	for _, e := range entries {
		data, err := files.ReadFile(e.Name())
		if err != nil {
			loadErr = errors.Join(loadErr, err)
			continue
		}
		name := strings.TrimSuffix(e.Name(), ".toml")
		p, err := Parse(name, data)
		if err != nil {
			loadErr = errors.Join(loadErr, err)
			continue
		}
		profiles[name] = p
	}
}

// Names lists the embedded profiles, sorted.
func Names() []string {
	loadOnce.Do(load)
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the embedded profile called name ("rpi4-arm64"). An unknown name gives an
// error wrapping ErrUnknownBoard that lists the known names. The returned Profile is a copy:
// changing it does not change later lookups.
func Lookup(name string) (Profile, error) {
	loadOnce.Do(load)
	p, ok := profiles[name]
	if !ok {
		if loadErr != nil {
			// A broken embedded profile is a build defect; the package tests catch it, but say
			// so rather than pretend the board does not exist.
			return Profile{}, fmt.Errorf("board %q: %w (embedded profiles failed to load: %v)", name, ErrUnknownBoard, loadErr)
		}
		return Profile{}, fmt.Errorf("board %q: %w; known boards: %s", name, ErrUnknownBoard, strings.Join(Names(), ", "))
	}
	p.SerialPorts = slices.Clone(p.SerialPorts)
	return p, nil
}

// All returns every embedded profile sorted by name, and the error of any that failed to load.
func All() ([]Profile, error) {
	var out []Profile
	for _, n := range Names() {
		p, _ := Lookup(n)
		out = append(out, p)
	}
	return out, loadErr
}

// fileSchema is the on-disk form; every key is required unless noted (see validate).
type fileSchema struct {
	Description        string    `toml:"description"`
	GOOS               string    `toml:"goos"`
	GOARCH             string    `toml:"goarch"`
	GOARM              string    `toml:"goarm"`
	QEMUCPU            string    `toml:"qemu_cpu"`
	RAM                byteSize  `toml:"ram"`
	SerialPorts        []string  `toml:"serial_ports"`
	GOMEMLIMIT         byteSize  `toml:"gomemlimit"`
	JournalSync        string    `toml:"journal_sync"`
	JournalBatchWindow *duration `toml:"journal_batch_window"` // only with journal_sync = "batch"
	DataDir            string    `toml:"data_dir"`
	Broker             struct {
		MaxClients           int      `toml:"max_clients"`
		MaxPendingWriteBytes byteSize `toml:"max_pending_write_bytes"`
		MaxSessionBytes      byteSize `toml:"max_session_bytes"`
		MaxQueuedBytes       byteSize `toml:"max_queued_bytes"`
		MaxRetainedBytes     byteSize `toml:"max_retained_bytes"`
		MaxInboundBytes      byteSize `toml:"max_inbound_bytes"`
		StoreMaxBytes        byteSize `toml:"store_max_bytes"`
	} `toml:"broker"` // optional, each key too
	Faces struct {
		MaxBytes byteSize `toml:"max_bytes"`
	} `toml:"faces"` // optional
	Intake struct {
		MaxWhitelist int `toml:"max_whitelist"`
	} `toml:"intake"` // optional
}

type byteSize struct {
	n    int64
	text string
}

func (b *byteSize) UnmarshalText(t []byte) error {
	n, err := ParseByteSize(string(t))
	if err != nil {
		return err
	}
	b.n, b.text = n, string(t)
	return nil
}

type duration time.Duration

func (d *duration) UnmarshalText(t []byte) error {
	v, err := time.ParseDuration(string(t))
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// lowerName reports whether s is 1..maxLen bytes of a-z 0-9 and the bytes in extra, starting with
// a letter or digit: board names (extra "-", 63) and qemu CPU models (extra ".-", 32).
func lowerName(s, extra string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// Parse decodes and validates one profile. name is the profile's name (the file's base name
// without ".toml"); errors read "boards/NAME.toml:LINE: what is wrong" where a line is known.
// Unknown keys are errors, so a misspelt key never silently falls back to a default.
func Parse(name string, data []byte) (Profile, error) {
	file := "boards/" + name + ".toml"
	if !lowerName(name, "-", 63) {
		return Profile{}, &ProfileError{File: file, Msg: "board name must be lower-case letters, digits and '-'"}
	}
	var raw fileSchema
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Profile{}, &ProfileError{File: file, Line: pe.Position.Line, Msg: pe.Message}
		}
		return Profile{}, &ProfileError{File: file, Msg: err.Error()}
	}
	if und := md.Undecoded(); len(und) > 0 {
		key := und[0].String()
		return Profile{}, &ProfileError{File: file, Line: keyLine(data, und[0][len(und[0])-1]), Msg: fmt.Sprintf("unknown key %q", key)}
	}
	p := Profile{
		Name:           name,
		Description:    raw.Description,
		GOOS:           raw.GOOS,
		GOARCH:         raw.GOARCH,
		GOARM:          raw.GOARM,
		QEMUCPU:        raw.QEMUCPU,
		RAM:            raw.RAM.n,
		SerialPorts:    raw.SerialPorts,
		GOMEMLIMIT:     raw.GOMEMLIMIT.n,
		GOMEMLIMITText: raw.GOMEMLIMIT.text,
		JournalSync:    SyncPolicy(raw.JournalSync),
		DataDir:        raw.DataDir,
		Broker: BrokerBounds{
			MaxClients:           raw.Broker.MaxClients,
			MaxPendingWriteBytes: raw.Broker.MaxPendingWriteBytes.n,
			MaxSessionBytes:      raw.Broker.MaxSessionBytes.n,
			MaxQueuedBytes:       raw.Broker.MaxQueuedBytes.n,
			MaxRetainedBytes:     raw.Broker.MaxRetainedBytes.n,
			MaxInboundBytes:      raw.Broker.MaxInboundBytes.n,
			StoreMaxBytes:        raw.Broker.StoreMaxBytes.n,
		},
		FacesMaxBytes:      raw.Faces.MaxBytes.n,
		IntakeMaxWhitelist: raw.Intake.MaxWhitelist,
	}
	if raw.JournalBatchWindow != nil {
		p.JournalBatchWindow = time.Duration(*raw.JournalBatchWindow)
	}
	if key, msg := validate(&p, md); msg != "" {
		return Profile{}, &ProfileError{File: file, Line: keyLine(data, key), Msg: msg}
	}
	return p, nil
}

// keyLine finds the 1-based line that assigns key, or 0.
func keyLine(data []byte, key string) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if rest, ok := bytes.CutPrefix(l, []byte(key)); ok {
			if r := bytes.TrimLeft(rest, " \t"); len(r) > 0 && r[0] == '=' {
				return i + 1
			}
		}
	}
	return 0
}

// Upper bound for a batch window: longer would hold every acknowledgement back noticeably.
const maxBatchWindow = time.Second

// Smallest soft memory limit that leaves the agent a working heap.
const minMemLimit = 32 << 20

// Smallest state store bound a profile may set (agent/config's own floor).
const minStoreBytes = 64 << 10

// Smallest face store budget a profile may set (agent/config's own floor).
const minFacesBytes = 1 << 20

// Largest SetWhitelist a profile may allow (agent/config's own ceiling); a board that
// refuses SetWhitelist tasks (0) is not a board default.
const maxWhitelist = 10_000_000

var knownArch = map[string]bool{"arm": true, "arm64": true, "amd64": true, "riscv64": true}

// validate returns the offending key and what is wrong, or "" and "".
func validate(p *Profile, md toml.MetaData) (key, msg string) {
	for _, k := range []string{"description", "goos", "goarch", "qemu_cpu", "ram", "gomemlimit", "journal_sync", "data_dir"} {
		if !md.IsDefined(k) {
			return "", fmt.Sprintf("missing key %q", k)
		}
	}
	switch {
	case strings.TrimSpace(p.Description) == "" || strings.ContainsAny(p.Description, "\n\r"):
		return "description", "description must be one non-empty line"
	case p.GOOS != "linux":
		return "goos", fmt.Sprintf("goos %q: only linux gateways are supported (systemd, /dev/tty*)", p.GOOS)
	case !knownArch[p.GOARCH]:
		return "goarch", fmt.Sprintf("goarch %q: want one of arm, arm64, amd64, riscv64", p.GOARCH)
	case p.GOARCH == "arm" && !validGOARM(p.GOARM):
		return "goarm", fmt.Sprintf("goarm %q: goarch arm needs goarm 5, 6 or 7 (optionally \",softfloat\" or \",hardfloat\")", p.GOARM)
	case p.GOARCH != "arm" && md.IsDefined("goarm"):
		return "goarm", fmt.Sprintf("goarm is only meaningful with goarch arm, not %q", p.GOARCH)
	case !lowerName(p.QEMUCPU, ".-", 32):
		return "qemu_cpu", fmt.Sprintf("qemu_cpu %q: want a qemu CPU model name such as \"cortex-a7\"", p.QEMUCPU)
	case p.RAM <= 0:
		return "ram", "ram must be positive"
	case p.GOMEMLIMIT < minMemLimit:
		return "gomemlimit", fmt.Sprintf("gomemlimit %s is below the %d MiB the agent needs", p.GOMEMLIMITText, minMemLimit>>20)
	case p.GOMEMLIMIT > p.RAM/2:
		return "gomemlimit", fmt.Sprintf("gomemlimit %s is more than half of ram: the OS and page cache need the rest", p.GOMEMLIMITText)
	case !path.IsAbs(p.DataDir) || path.Clean(p.DataDir) != p.DataDir || p.DataDir == "/":
		return "data_dir", fmt.Sprintf("data_dir %q must be a clean absolute path other than /", p.DataDir)
	case md.IsDefined("broker", "store_max_bytes") && (p.Broker.StoreMaxBytes < minStoreBytes || p.Broker.StoreMaxBytes > p.GOMEMLIMIT/4):
		return "store_max_bytes", fmt.Sprintf("broker.store_max_bytes %d must be at least %d KiB and at most a quarter of gomemlimit "+
			"(the store's keys and, as much again, its queued notifications live in that heap)", p.Broker.StoreMaxBytes, minStoreBytes>>10)
	case md.IsDefined("faces", "max_bytes") && p.FacesMaxBytes < minFacesBytes:
		return "max_bytes", fmt.Sprintf("faces.max_bytes %d must be at least %d MiB", p.FacesMaxBytes, minFacesBytes>>20)
	case md.IsDefined("intake", "max_whitelist") && (p.IntakeMaxWhitelist < 1 || p.IntakeMaxWhitelist > maxWhitelist):
		return "max_whitelist", fmt.Sprintf("intake.max_whitelist %d is out of range (1..%d)", p.IntakeMaxWhitelist, maxWhitelist)
	}
	for _, k := range []struct {
		key string
		v   int64
	}{{"max_clients", int64(p.Broker.MaxClients)}, {"max_pending_write_bytes", p.Broker.MaxPendingWriteBytes},
		{"max_session_bytes", p.Broker.MaxSessionBytes}, {"max_queued_bytes", p.Broker.MaxQueuedBytes},
		{"max_retained_bytes", p.Broker.MaxRetainedBytes}, {"max_inbound_bytes", p.Broker.MaxInboundBytes}} {
		if md.IsDefined("broker", k.key) && k.v <= 0 {
			return k.key, fmt.Sprintf("broker.%s must be positive", k.key)
		}
	}
	seen := map[string]bool{}
	for _, sp := range p.SerialPorts {
		if !strings.HasPrefix(sp, "/dev/") || path.Clean(sp) != sp {
			return "serial_ports", fmt.Sprintf("serial port %q must be a clean path under /dev/", sp)
		}
		if seen[sp] {
			return "serial_ports", fmt.Sprintf("serial port %q listed twice", sp)
		}
		seen[sp] = true
	}
	switch p.JournalSync {
	case SyncBatch:
		if p.JournalBatchWindow <= 0 || p.JournalBatchWindow > maxBatchWindow {
			return "journal_batch_window", fmt.Sprintf("journal_sync = \"batch\" needs journal_batch_window in (0, %v], got %v", maxBatchWindow, p.JournalBatchWindow)
		}
	case SyncAlways, SyncNone:
		if md.IsDefined("journal_batch_window") {
			return "journal_batch_window", fmt.Sprintf("journal_batch_window is only meaningful with journal_sync = \"batch\", not %q", p.JournalSync)
		}
	default:
		return "journal_sync", fmt.Sprintf("journal_sync %q: want always, batch or none", p.JournalSync)
	}
	return "", ""
}

func validGOARM(s string) bool {
	v, suffix, _ := strings.Cut(s, ",")
	return (v == "5" || v == "6" || v == "7") && (suffix == "" || suffix == "softfloat" || suffix == "hardfloat")
}

// ParseByteSize parses a size in the GOMEMLIMIT syntax: a decimal integer followed by
// nothing or B (bytes), KiB, MiB, GiB or TiB. "128MiB" is 134217728.
func ParseByteSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	if num == "" || len(num) > 19 {
		return 0, fmt.Errorf("size %q: want a whole number with an optional B, KiB, MiB, GiB or TiB suffix", s)
	}
	var n int64
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("size %q: want a whole number with an optional B, KiB, MiB, GiB or TiB suffix", s)
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, fmt.Errorf("size %q overflows int64", s)
		}
		n = n*10 + d
	}
	if n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("size %q overflows int64", s)
	}
	return n << shift, nil
}
