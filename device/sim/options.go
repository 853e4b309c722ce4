package sim

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Options are the knobs of every simulated terminal of a fleet. The zero value is a
// well-behaved terminal: instant acks, no loss, no refusals, no heartbeats, never offline.
type Options struct {
	// Seed makes a run reproducible: terminal i draws from its own generator seeded with
	// (Seed, i). The same seed and the same command sequence give the same fates.
	Seed uint64

	AckLatency Latency // time between receiving a command and acking it
	// AckLoss is the probability that an ack is never sent although the command was applied
	// (the terminal believes it answered; the agent will resend the same messageId).
	AckLoss float64
	// RefuseRate is the probability that a command is refused: not applied, acked with
	// RefuseCode. A refused messageId is refused again if it comes back.
	RefuseRate float64
	RefuseCode int // default 17

	// Protocol is the protocol version the terminals speak: 2 (the default, for 0) or 1
	// (no v2 fields in heartbeats, ListPersons refused as an unknown op, revs not kept).
	// Terminal.SetProtocol changes it for one terminal while running.
	Protocol int
	// Capacity is the most persons a terminal holds (0: no limit), reported in v2
	// heartbeats; an AddPerson of a new person beyond it is refused with CapacityCode.
	Capacity int

	// Batch is the most persons one AddPersons may carry (0: no batches; AddPersons is
	// refused as an unknown op), reported in v2 heartbeats; at most face.MaxBatch.
	Batch int
	// PersonTime is what storing one person takes, on top of AckLatency: an AddPerson
	// acks PersonTime later, an AddPersons of n persons n×PersonTime later.
	PersonTime time.Duration
	// CutFace, when positive, cuts the first transfer of every face once the terminal
	// holds CutFace bytes of it (Terminal.SetCutFace): a test of the agent's resumption.
	CutFace int
	// Baud, when positive, paces a serial terminal's reads and writes to Baud/10 bytes a
	// second, as a UART does (a pty does not). 0: as fast as the port goes.
	Baud int

	HeartbeatInterval time.Duration // 0: no heartbeats
	Firmware          string        // reported in heartbeats; default "facesim-1"

	// OfflineEvery is the mean time between offline periods (exponentially distributed);
	// OfflineFor is how long each lasts. 0 disables them. While offline a terminal hears
	// nothing (MQTT: it is disconnected; serial: it discards what arrives) and sends nothing.
	OfflineEvery, OfflineFor time.Duration
	// GarbageRate is the probability that a message the terminal sends is preceded by
	// garbage (serial: random bytes, SOF bytes among them; MQTT: a malformed JSON ack).
	GarbageRate float64
	// CrashRate is the probability that a command crashes the terminal mid-command: it
	// applies the command or not (even odds), never acks it, writes a cut frame (serial),
	// and is offline for CrashDowntime (default 1s). Its pending commands are forgotten.
	CrashRate     float64
	CrashDowntime time.Duration

	// Strict makes a terminal fail loudly when a command arrives while an earlier one is
	// still unacked — the one-in-flight limit. See the package doc for the exact rule.
	Strict bool
	// OnViolation, if set, is called (from the terminal's goroutine) for every strict-mode
	// violation, besides recording it; tests may t.Error from it.
	OnViolation func(deviceID string, err error)

	// OnCommand, if set, is called with every command the transport delivers to a
	// terminal, in arrival order, before the terminal handles it (also while it is
	// offline and drops it), from the terminal's goroutine: tests follow what a terminal
	// was sent. It must not block for long.
	OnCommand func(deviceID string, cmd face.Command)

	// MQTT topic templates with "{id}"; defaults as in device/mqttlink.
	CommandTopic, AckTopic, HeartbeatTopic string

	// Username, when not empty, is sent in every CONNECT, with "{id}" replaced by the
	// terminal's device id (one account per terminal, as a broker's users file may have);
	// Password, when not nil, goes with it.
	Username string
	Password []byte
	// TLS configures the connection to an mqtts://, ssl:// or tls:// broker (server CA,
	// client certificate for mutual TLS); nil there means the system roots.
	TLS *tls.Config

	Logger *slog.Logger // default: discard
}

func (o *Options) fill() {
	if o.Protocol == 0 {
		o.Protocol = 2
	}
	if o.RefuseCode == 0 {
		o.RefuseCode = 17
	}
	if o.Firmware == "" {
		o.Firmware = "facesim-1"
	}
	if o.CrashDowntime <= 0 {
		o.CrashDowntime = time.Second
	}
	if o.CommandTopic == "" {
		o.CommandTopic = "dev/face/{id}"
	}
	if o.AckTopic == "" {
		o.AckTopic = "dev/face/{id}/Ack"
	}
	if o.HeartbeatTopic == "" {
		o.HeartbeatTopic = "dev/face/{id}/heartbeat"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Latency is a delay distribution. The zero value is no delay.
type Latency struct {
	Kind LatencyKind
	A, B time.Duration // Fixed: A. Uniform: A..B. Exponential: mean A. Normal: mean A, stddev B.
}

// LatencyKind names a distribution.
type LatencyKind uint8

// Distributions.
const (
	Fixed LatencyKind = iota
	Uniform
	Exponential
	Normal
)

// Sample draws one delay (never negative).
func (l Latency) Sample(r *rand.Rand) time.Duration {
	var d float64
	switch l.Kind {
	case Uniform:
		d = float64(l.A) + r.Float64()*float64(l.B-l.A)
	case Exponential:
		d = r.ExpFloat64() * float64(l.A)
	case Normal:
		d = r.NormFloat64()*float64(l.B) + float64(l.A)
	default:
		d = float64(l.A)
	}
	return time.Duration(math.Max(d, 0))
}

// String renders the latency in the form ParseLatency reads.
func (l Latency) String() string {
	switch l.Kind {
	case Uniform:
		return fmt.Sprintf("uniform:%s-%s", l.A, l.B)
	case Exponential:
		return fmt.Sprintf("exp:%s", l.A)
	case Normal:
		return fmt.Sprintf("normal:%s,%s", l.A, l.B)
	}
	return l.A.String()
}

// ParseLatency reads "50ms" (fixed), "uniform:10ms-200ms", "exp:50ms" (exponential with
// that mean) or "normal:100ms,20ms" (mean, standard deviation; clamped at 0).
func ParseLatency(s string) (Latency, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return Latency{}, fmt.Errorf("latency %q: want a duration, uniform:MIN-MAX, exp:MEAN or normal:MEAN,STDDEV", s)
		}
		return Latency{Kind: Fixed, A: d}, nil
	}
	two := func(sep string) (time.Duration, time.Duration, error) {
		x, y, ok := strings.Cut(rest, sep)
		if !ok {
			return 0, 0, fmt.Errorf("latency %q: want two durations separated by %q", s, sep)
		}
		a, err1 := time.ParseDuration(x)
		b, err2 := time.ParseDuration(y)
		if err1 != nil || err2 != nil || a < 0 || b < 0 {
			return 0, 0, fmt.Errorf("latency %q: bad duration", s)
		}
		return a, b, nil
	}
	switch kind {
	case "uniform":
		a, b, err := two("-")
		if err == nil && b < a {
			err = fmt.Errorf("latency %q: max below min", s)
		}
		return Latency{Kind: Uniform, A: a, B: b}, err
	case "exp":
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return Latency{}, fmt.Errorf("latency %q: bad mean", s)
		}
		return Latency{Kind: Exponential, A: d}, nil
	case "normal":
		a, b, err := two(",")
		return Latency{Kind: Normal, A: a, B: b}, err
	}
	return Latency{}, fmt.Errorf("latency %q: unknown distribution %q", s, kind)
}
