package ui

import (
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"
)

// Bounds of the recent deadletters the page shows.
const (
	// MaxDeadLetters is how many recent deadletters are kept (the oldest is forgotten).
	MaxDeadLetters = 50
	// MaxDeadLetterPayload is how much of a deadletter's payload is kept, in bytes.
	MaxDeadLetterPayload = 512
)

// recentDeadLetters is a ring of the last MaxDeadLetters deadletters.
type recentDeadLetters struct {
	mu   sync.Mutex
	ring []DeadLetter
	next int
}

// add parses deadletters ({"reason":…,"payload":…}, as the deadletter log takes them)
// and keeps them; one that is not such JSON is kept whole as the payload.
func (r *recentDeadLetters) add(payloads [][]byte, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range payloads {
		var dl struct {
			Reason  string          `json:"reason"`
			Payload json.RawMessage `json:"payload"`
		}
		d := DeadLetter{At: at.UnixMilli()}
		if err := json.Unmarshal(p, &dl); err == nil {
			d.Reason = clip(dl.Reason, MaxDeadLetterPayload)
			var s string
			if json.Unmarshal(dl.Payload, &s) == nil {
				d.Payload = clip(s, MaxDeadLetterPayload) // a payload that was not JSON
			} else {
				d.Payload = clip(string(dl.Payload), MaxDeadLetterPayload)
			}
		} else {
			d.Payload = clip(string(p), MaxDeadLetterPayload)
		}
		if len(r.ring) < MaxDeadLetters {
			r.ring = append(r.ring, d)
			continue
		}
		r.ring[r.next] = d
		r.next = (r.next + 1) % MaxDeadLetters
	}
}

// list returns the kept deadletters, newest first.
func (r *recentDeadLetters) list() []DeadLetter {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]DeadLetter, 0, len(r.ring))
	for i := range r.ring {
		out = append(out, r.ring[(r.next+len(r.ring)-1-i)%len(r.ring)])
	}
	return out
}

// clip cuts s to at most n bytes on a character boundary, marking the cut with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
