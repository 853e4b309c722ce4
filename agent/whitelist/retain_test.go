package whitelist

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// inside reports whether s's bytes lie within buf's: a string kept for long that does
// pins all of buf. The intake parses a task message of up to 256 KiB into strings that
// share one copy of it (agent/wire), so a device id kept as a map key would keep a whole
// message alive for as long as the terminal is known.
func inside(s, buf string) bool {
	if len(s) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(buf)))
	return p >= lo && p < lo+uintptr(len(buf))
}

// message returns a large string and a device id and a serial that are substrings of it,
// as a parsed message's strings are.
func message() (buf, dev, serial string) {
	buf = strings.Repeat(" ", 64<<10) + `"dev-1" "SN-0042"`
	i := strings.Index(buf, "dev-1")
	j := strings.Index(buf, "SN-0042")
	return buf, buf[i : i+5], buf[j : j+7]
}

func TestStoreKeepsNoCallerString(t *testing.T) {
	buf, dev, _ := message()
	for name, update := range map[string]func(s *Store) error{
		"Set": func(s *Store) error { return s.Set(dev, Record{ID: "951", Name: "Li Lei"}) },
		"Replace": func(s *Store) error {
			_, err := s.Replace(dev, []Record{{ID: "951", Name: "Li Lei"}})
			return err
		},
	} {
		s := openTest(t, t.TempDir(), Options{})
		if err := update(s); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		for k := range s.st.terms {
			if inside(k, buf) {
				t.Errorf("%s: the store keeps the caller's device id string (and the message it is part of)", name)
			}
		}
		s.mu.Unlock()
	}
}

func TestReconcilerKeepsNoCallerString(t *testing.T) {
	buf, dev, serial := message()
	h := newHarness(t, ReconcileOptions{})
	h.rec.TasksPending(dev, true)
	var d face.Digest
	h.rec.Heartbeat(dev, face.Heartbeat{DeviceID: dev, Protocol: 2, Serial: serial, Digest: d.String()})
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for k, tm := range h.rec.terms {
		if inside(k, buf) || inside(tm.dev, buf) {
			t.Error("the reconciler keeps the caller's device id string (and the message it is part of)")
		}
		if inside(tm.serial, buf) {
			t.Error("the reconciler keeps the heartbeat's serial string (and the message it is part of)")
		}
		if tm.serial != "SN-0042" {
			t.Errorf("serial %q, want SN-0042", tm.serial)
		}
	}
}
