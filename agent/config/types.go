package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written as a string in TOML: "2s", "1m30s", "500ms", and
// also whole days, "7d", which time.ParseDuration lacks. Bare numbers are refused: "is 30
// seconds or milliseconds?" is exactly the question a config file must not leave open.
type Duration struct{ time.Duration }

// D wraps a time.Duration.
func D(d time.Duration) Duration { return Duration{d} }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler; the output parses back to the same value.
func (d Duration) MarshalText() ([]byte, error) {
	v := d.Duration
	if v != 0 && v%(24*time.Hour) == 0 {
		return []byte(strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"), nil
	}
	return []byte(v.String()), nil
}

// ParseDuration parses a duration string: time.ParseDuration's syntax plus "<n>d".
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New(`empty duration (write e.g. "2s")`)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("invalid duration %q (days must be a whole number)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return 0, fmt.Errorf("duration %q has no unit (write e.g. %q)", s, s+"s")
		}
		return 0, fmt.Errorf("invalid duration %q (write e.g. \"2s\", \"500ms\", \"7d\")", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return v, nil
}

// Size is a byte count written as a string ("64MiB", "512KiB", "1GB") or an integer
// number of bytes.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"B", 1},
}

// UnmarshalText implements encoding.TextUnmarshaler. TOML integers arrive here as their
// decimal text, so `max_packet_size = 1048576` works too.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler: the largest binary unit that divides the
// value exactly.
func (s Size) MarshalText() ([]byte, error) {
	v := int64(s)
	if v == 0 {
		return []byte("0"), nil
	}
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.mult == 0 {
			return []byte(strconv.FormatInt(v/u.mult, 10) + u.suffix), nil
		}
	}
	return []byte(strconv.FormatInt(v, 10) + "B"), nil
}

// ParseSize parses a size: a non-negative integer with an optional unit (B, KB, KiB, MB,
// MiB, GB, GiB, TB, TiB).
func ParseSize(str string) (int64, error) {
	s := strings.TrimSpace(str)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (write e.g. \"64MiB\" or a number of bytes)", str)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", str)
	}
	return n * mult, nil
}
