package whitelist

import (
	"fmt"
	"slices"
	"strings"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// The hardware serial each terminal reported last is kept beside the desired lists, in the
// same journal: a terminal replaced while the agent was stopped is then noticed by its
// serial at its first heartbeat after the restart, not only later by its digest. Serials
// are independent of the lists: a terminal may have one without a desired list, and
// Forget (which an undo of a task may call) leaves it.

// Serial returns the serial last recorded for dev ("" if none).
func (s *Store) Serial(dev string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.serials[dev]
}

// SetSerial records serial as the one dev reported last ("" forgets it). It applies at
// once and is written to the journal without waiting (Flush waits for it). Serials are
// kept for at most MaxTerminals terminals (ErrTooManyTerminals), each of at most MaxIDLen
// bytes (ErrInvalid).
func (s *Store) SetSerial(dev, serial string) error {
	if err := checkID("device id", dev); err != nil {
		return err
	}
	if len(serial) > MaxIDLen {
		return fmt.Errorf("%w: serial longer than %d bytes", ErrInvalid, MaxIDLen)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	old, had := s.st.serials[dev]
	switch {
	case old == serial:
		return nil
	case !had && len(s.st.serials) >= s.opt.MaxTerminals:
		return fmt.Errorf("%w: serials", ErrTooManyTerminals)
	}
	b := appendString(appendString(append(s.st.enc[:0], recordVersion, kindSerial), dev), serial)
	seq, err := s.j.AppendAsync(b)
	s.st.enc = b[:0]
	if err != nil {
		return err
	}
	s.last = seq
	s.st.setSerial(dev, serial)
	s.logBytes += int64(len(b) + journal.FrameOverhead)
	s.compactIfGrown()
	return nil
}

func (st *state) setSerial(dev, serial string) {
	if serial == "" {
		delete(st.serials, dev)
		return
	}
	st.serials[dev] = serial
}

// capturedSerials returns the serials as (device, serial) pairs sorted by device, for a
// snapshot. Called with mu held.
func (st *state) capturedSerials() [][2]string {
	out := make([][2]string, 0, len(st.serials))
	for dev, serial := range st.serials {
		out = append(out, [2]string{dev, serial})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// appendSerials emits the snapshot's serial records, each under 64 KiB.
func appendSerials(buf []byte, serials [][2]string, put func([]byte) error) ([]byte, error) {
	buf = append(buf[:0], recordVersion, kindSerials)
	for _, p := range serials {
		if len(buf) > 2 && len(buf)+2*(MaxIDLen+2) > 64<<10 {
			if err := put(buf); err != nil {
				return buf, err
			}
			buf = buf[:2]
		}
		buf = appendString(appendString(buf, p[0]), p[1])
	}
	if len(buf) > 2 {
		return buf, put(buf)
	}
	return buf, nil
}
