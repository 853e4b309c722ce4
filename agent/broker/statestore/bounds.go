package statestore

import (
	"bytes"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// What the store counts against Options.MaxBytes besides key and value
// bytes. They are upper estimates of the heap the bookkeeping takes
// (BenchmarkMemoryPerKey and BenchmarkMemoryPerRegistration measure it; see
// docs/benchmarks.md), so that MaxBytes bounds the memory the store holds,
// not only the bytes clients sent.
const (
	// KeyOverhead is counted for every stored key: the entry, its map slot,
	// its expiry heap slot and the version's node id.
	KeyOverhead = 160
	// FenceOverhead is counted for a key's fencing token, with the bytes of
	// the token's node id (which the request chooses).
	FenceOverhead = 48
	// RegistrationOverhead is counted for every KEYNOTIFY registration, with
	// the bytes of its key (registrations of keys that do not exist count
	// the same).
	RegistrationOverhead = 160
	// DeferredOverhead is counted, with its key and value bytes, for every
	// notification waiting for the snapshot that holds its change (or behind
	// one of the same key), until it is handed to the watchers; WaiterOverhead,
	// with its reply and Request.WaitBytes, for every DoDurable answer waiting
	// for its snapshot, until done is called. Together they bound what
	// BenchmarkMemoryPerWaitingChange measures, their arrays' spare room included.
	DeferredOverhead = 160
	WaiterOverhead   = 160
)

// Bound names one of the store's bounds; Stats counts the requests each one
// refused.
type Bound uint8

// The bounds, in the order Stats.Refused lists them.
const (
	BoundKeys      Bound = iota // Options.MaxKeys
	BoundBytes                  // Options.MaxBytes
	BoundKeySize                // Options.MaxKeySize
	BoundValueSize              // Options.MaxValueSize
	BoundNotify                 // Options.MaxNotify
	numBounds
)

// String names the bound as configuration and metrics do.
func (b Bound) String() string {
	switch b {
	case BoundKeys:
		return "keys"
	case BoundBytes:
		return "bytes"
	case BoundKeySize:
		return "key_size"
	case BoundValueSize:
		return "value_size"
	case BoundNotify:
		return "notify"
	}
	return "unknown"
}

// Stats are the store's counts, for metrics.
type Stats struct {
	Keys          int   // stored keys (expired ones not yet swept included)
	Bytes         int64 // what counts against Options.MaxBytes
	Registrations int   // KEYNOTIFY registrations
	// Refused counts the requests each bound refused, indexed by Bound.
	Refused [numBounds]uint64
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Keys: len(s.keys), Bytes: s.bytes, Registrations: s.watchers.count, Refused: s.refused}
}

// entryCost is what an entry with these key, value and fence counts against
// MaxBytes.
func entryCost(key, value int, fence *hlc.Timestamp) int64 {
	c := int64(key+value) + KeyOverhead
	if fence != nil {
		c += FenceOverhead + int64(len(fence.Node))
	}
	return c
}

func (e *entry) cost() int64 { return entryCost(len(e.key), len(e.value), e.fence) }

// deferredCost is what a notification waiting for a snapshot counts.
func deferredCost(key, value int) int64 { return int64(key+value) + DeferredOverhead }

// waiterCost is what an answer waiting for a snapshot counts.
func waiterCost(reply, held int) int64 { return int64(reply+held) + WaiterOverhead }

// pendingCost is what a change of key (to a value of valueLen bytes; a change of the
// persistent set when persistChange) leaves waiting for its snapshot: the answer of a
// DoDurable request, and the notification deferred (notify). Called with s.mu held.
func (s *Store) pendingCost(req *Request, key []byte, valueLen int, persistChange bool) int64 {
	var c int64
	if persistChange && req.durable {
		c += waiterCost(len("+OK\r\n"), req.WaitBytes)
	}
	if s.deferredBy[string(key)] > 0 || (persistChange && s.watchers.has(string(key))) {
		c += deferredCost(len(key), valueLen)
	}
	return c
}

// registrationCost is what one KEYNOTIFY registration of key counts.
func registrationCost(key int) int64 { return int64(key) + RegistrationOverhead }

// refusalLogEvery bounds the warnings of refused requests: one a minute per
// bound, with the count since the last one.
const refusalLogEvery = time.Minute

// refuse counts a request b refused and warns about it at most once a minute
// per bound, and returns the reply text. Called with s.mu held.
func (s *Store) refuse(b Bound) string {
	s.refused[b]++
	now := time.Now()
	if now.Sub(s.refusalLogged[b]) >= refusalLogEvery {
		s.log.Warn("statestore: request refused by a bound", "bound", b.String(),
			"refused_since_last_warning", s.refused[b]-s.refusedLogged[b], "keys", len(s.keys), "bytes", s.bytes)
		s.refusalLogged[b], s.refusedLogged[b] = now, s.refused[b]
	}
	return ErrTextQuota
}

// reserved reports whether key lies under one of Options.ReservedPrefixes.
func (s *Store) reserved(key []byte) bool {
	for _, p := range s.reservedPrefixes {
		if bytes.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
