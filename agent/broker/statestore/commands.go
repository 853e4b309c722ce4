package statestore

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Request is one state store request with the MQTT user properties that
// matter to the engine. Payload is only read during Do; the store copies what
// it keeps. The properties are strings because mochi hands user properties
// over as strings: the engine parses them without copying.
type Request struct {
	// Payload is the RESP3 command (an array of blob strings).
	Payload []byte
	// Timestamp is the __ts user property; HasTimestamp says whether it was
	// present at all (an empty value is present and malformed).
	Timestamp    string
	HasTimestamp bool
	// FencingToken is the __ft user property, HasFencingToken its presence.
	FencingToken    string
	HasFencingToken bool
	// Persist is the user property "aio-persistence: true": a SET keeps the
	// key on disk across a restart (when the store has a SnapshotPath).
	Persist bool
	// Watcher is the connection that KEYNOTIFY registers. Nil makes KEYNOTIFY
	// answer "not authorized" (an in-process caller with no connection).
	Watcher Watcher
	// Access decides key-prefix authorization; nil allows every key.
	Access KeyAccess
	// Owner marks a request of the in-process owner of
	// Options.ReservedPrefixes: it may write keys under them. Never set it for
	// a request that came from a network client.
	Owner bool
	// WaitBytes, for DoDurable, is what the caller's done holds until it is
	// called (the address of the answer, say). It counts against MaxBytes
	// with the waiting answer (see WaiterOverhead).
	WaitBytes int

	persistSeq uint64 // set by Do: the change of the persistent set it made
	durable    bool   // set by DoDurable: a change of the persistent set waits for its snapshot
}

// KeyAccess authorizes a request's key. write is true for SET, DEL and VDEL,
// false for GET and KEYNOTIFY.
type KeyAccess interface {
	AllowKey(key []byte, write bool) bool
}

// maxArgs bounds the arguments of one command: SET k v NX PX n plus room for
// a client that repeats options (which is a syntax error anyway).
const maxArgs = 16

// Do executes one request and appends its RESP3 reply to dst. version is the
// __ts the response must carry; it is zero when the reply has none (errors,
// GET or DEL of a missing key, KEYNOTIFY). Do never blocks on I/O.
func (s *Store) Do(req *Request, dst []byte) (out []byte, version hlc.Timestamp) {
	req.persistSeq = 0
	var argv [maxArgs][]byte
	args, err := resp3.ParseCommand(req.Payload, argv[:0])
	if err != nil || len(args) == 0 {
		return appendErr(dst, ErrTextSyntax), version
	}
	verb := args[0]
	switch {
	case equalFold(verb, "SET"):
		return s.set(req, args, dst)
	case equalFold(verb, "GET"):
		return s.get(req, args, dst)
	case equalFold(verb, "DEL"):
		return s.del(req, args, dst, false)
	case equalFold(verb, "VDEL"):
		return s.del(req, args, dst, true)
	case equalFold(verb, "KEYNOTIFY"):
		return s.keynotify(req, args, dst), version
	}
	return appendErr(dst, ErrTextUnknown), version
}

// checkKey applies the checks every verb shares once arity is known. A key
// over MaxKeySize is refused by every verb, as an empty one is: it can never
// be stored.
func (s *Store) checkKey(req *Request, key []byte, write bool) string {
	if len(key) == 0 {
		return ErrTextZeroKey
	}
	if s.maxKeySize > 0 && len(key) > s.maxKeySize {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.refuse(BoundKeySize)
	}
	if req.Access != nil && !req.Access.AllowKey(key, write) {
		return ErrTextNotAuthorized
	}
	if write && !req.Owner && s.reserved(key) {
		return ErrTextNotAuthorized
	}
	return ""
}

// setOptions are the parsed options of a SET: NX, NEX and PX in any order,
// in either case (wire facts 2 and 8).
type setOptions struct {
	nx, nex bool
	px      int64 // ms; 0: none
}

// maxPX is the longest PX accepted, about 292 years: the longest time.Duration
// in milliseconds. A longer one would overflow the deadline (the key vanished
// at once behind an +OK) or the sweeper's timer (it spun every millisecond),
// so it is an integer overflow, which the protocol calls a syntax error.
const maxPX = int64(math.MaxInt64 / int64(time.Millisecond))

func parseSetOptions(args [][]byte) (o setOptions, ok bool) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case equalFold(a, "NX") && !o.nx && !o.nex:
			o.nx = true
		case equalFold(a, "NEX") && !o.nx && !o.nex:
			o.nex = true // wire fact 2: NEX takes no argument
		case equalFold(a, "PX") && o.px == 0 && i+1 < len(args):
			i++
			n, err := strconv.ParseInt(unsafe.String(unsafe.SliceData(args[i]), len(args[i])), 10, 64)
			if err != nil || n <= 0 || n > maxPX {
				return o, false
			}
			o.px = n
		default:
			return o, false
		}
	}
	return o, true
}

func (s *Store) set(req *Request, args [][]byte, dst []byte) ([]byte, hlc.Timestamp) {
	var none hlc.Timestamp
	if len(args) < 3 {
		return appendErr(dst, ErrTextArity), none
	}
	key, value := args[1], args[2]
	opts, ok := parseSetOptions(args[3:])
	if !ok {
		return appendErr(dst, ErrTextSyntax), none
	}
	if msg := s.checkKey(req, key, true); msg != "" {
		return appendErr(dst, msg), none
	}
	// protocol: "When clients do a SET, they must set the MQTT5 user property __ts"
	if !req.HasTimestamp {
		return appendErr(dst, ErrTextNoTimestamp), none
	}
	ts, err := hlc.ParseString(req.Timestamp)
	if err != nil {
		return appendErr(dst, ErrTextBadTimestamp), none
	}
	ft, msg := parseFenceToken(req)
	if msg != "" {
		return appendErr(dst, msg), none
	}
	applied, version, msg := s.setChecked(req, key, value, opts, ts, ft)
	switch {
	case msg != "":
		return appendErr(dst, msg), none
	case !applied:
		return resp3.AppendInt(dst, -1), version // wire fact 1: the stored version in __ts
	}
	return resp3.AppendSimpleString(dst, "OK"), version
}

// setChecked applies a SET whose key passed checkKey and whose timestamp and fencing token
// (when req.HasFencingToken) are parsed: the drift checks, the bounds, the condition, the
// fencing token, the version, expiry, persistence and notifications. Every SET goes
// through it, the RESP3 command (set) and the typed Set alike, so the rules have one
// code path. It returns whether the SET was applied and the version (the new one, or the
// stored one when a condition refused it), or the error text of a refusal.
func (s *Store) setChecked(req *Request, key, value []byte, opts setOptions, ts, ft hlc.Timestamp) (applied bool, version hlc.Timestamp, errText string) {
	var none hlc.Timestamp
	if req.HasFencingToken {
		if err := s.clock.CheckDrift(ft); err != nil {
			return false, none, ErrTextFencingAhead
		}
	}
	if err := s.clock.CheckDrift(ts); err != nil {
		return false, none, ErrTextTimestampAhead
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxValue > 0 && len(value) > s.maxValue {
		return false, none, s.refuse(BoundValueSize)
	}
	e := s.lookup(key)
	if e != nil {
		// wire fact 1: a refused SET is :-1 with the stored version in __ts.
		// The condition is checked before the fencing token: see checkFence.
		if opts.nx || (opts.nex && !bytes.Equal(e.value, value)) {
			s.clock.Observe(ts)
			return false, e.version, ""
		}
		if msg := checkFence(e, req, ft); msg != "" {
			return false, none, msg
		}
	}
	// The fence the key will have: the request's token when it is newer.
	var fence *hlc.Timestamp
	if e != nil {
		fence = e.fence
	}
	newFence := req.HasFencingToken && (fence == nil || hlc.Compare(ft, *fence) > 0)
	if newFence {
		fence = &ft
	}
	grow := entryCost(len(key), len(value), fence)
	bounded := !(req.Owner && s.reserved(key)) // see Options.ReservedPrefixes
	if e == nil {
		if bounded && s.maxKeys > 0 && len(s.keys) >= s.maxKeys {
			return false, none, s.refuse(BoundKeys)
		}
	} else {
		grow -= e.cost()
	}
	// What waits for the change's snapshot counts too (pendingCost): while snapshot writes
	// fail, the answers and notifications waiting fill the store, not the heap.
	persistChange := s.snapshot != nil && (req.Persist || (e != nil && e.persist))
	pending := s.pendingCost(req, key, len(value), persistChange)
	if bounded && s.maxBytes > 0 && grow+pending > 0 && s.bytes+grow+pending > s.maxBytes {
		return false, none, s.refuse(BoundBytes)
	}
	version, err := s.clock.Update(ts)
	if err != nil { // raced past the drift check: the wall clock moved back
		return false, none, ErrTextTimestampAhead
	}

	stored := append(make([]byte, 0, len(value)), value...) // the one allocation of a SET
	if e == nil {
		e = &entry{key: string(key), heapIndex: -1}
		s.keys[e.key] = e
	}
	s.bytes += grow
	e.value = stored
	e.version = version
	if newFence {
		f := ft
		f.Node = strings.Clone(ft.Node) // keep the node id, not the request's property string
		e.fence = &f
	}
	s.setExpiry(e, opts.px)
	if e.persist != req.Persist {
		if req.Persist {
			s.persisted[e] = struct{}{}
		} else {
			delete(s.persisted, e)
		}
		e.persist = req.Persist
		req.persistSeq = s.markDirty()
	} else if e.persist {
		req.persistSeq = s.markDirty()
	}
	if s.watchers.has(e.key) || len(s.deferred) > 0 {
		s.notify(e.key, OpSet, stored, version, req.persistSeq)
	}
	return true, version, ""
}

func (s *Store) get(req *Request, args [][]byte, dst []byte) ([]byte, hlc.Timestamp) {
	var none hlc.Timestamp
	if len(args) != 2 {
		return appendErr(dst, ErrTextArity), none
	}
	if msg := s.checkKey(req, args[1], false); msg != "" {
		return appendErr(dst, msg), none
	}
	value, version, found := s.getChecked(args[1])
	if !found {
		return resp3.AppendNullBlob(dst), none // wire fact 12: no __ts
	}
	return resp3.AppendBlob(dst, value), version
}

// getChecked returns the stored value of a key that passed checkKey (GET and the typed
// Get). The value is the store's, never modified: the caller must not modify it either.
func (s *Store) getChecked(key []byte) (value []byte, version hlc.Timestamp, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key)
	if e == nil {
		return nil, version, false
	}
	return e.value, e.version, true
}

// del serves DEL and VDEL (vdel: delete only when the value matches).
func (s *Store) del(req *Request, args [][]byte, dst []byte, vdel bool) ([]byte, hlc.Timestamp) {
	var none hlc.Timestamp
	if (!vdel && len(args) != 2) || (vdel && len(args) != 3) {
		return appendErr(dst, ErrTextArity), none
	}
	key := args[1]
	if msg := s.checkKey(req, key, true); msg != "" {
		return appendErr(dst, msg), none
	}
	ft, msg := s.parseFence(req)
	if msg != "" {
		return appendErr(dst, msg), none
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key)
	if e == nil {
		return resp3.AppendInt(dst, 0), none // wire fact 1
	}
	if vdel && !bytes.Equal(e.value, args[2]) {
		return resp3.AppendInt(dst, -1), e.version // wire fact 1; before the fence: see checkFence
	}
	if msg := checkFence(e, req, ft); msg != "" {
		return appendErr(dst, msg), none
	}
	req.persistSeq = s.remove(e)
	s.notifyDelete(e.key, req.persistSeq)
	return resp3.AppendInt(dst, 1), e.version
}

func (s *Store) keynotify(req *Request, args [][]byte, dst []byte) []byte {
	if len(args) != 2 && len(args) != 3 {
		return appendErr(dst, ErrTextArity)
	}
	stop := len(args) == 3
	if stop && !equalFold(args[2], "STOP") {
		return appendErr(dst, ErrTextSyntax)
	}
	if msg := s.checkKey(req, args[1], false); msg != "" {
		return appendErr(dst, msg)
	}
	if req.Watcher == nil {
		return appendErr(dst, ErrTextNotAuthorized)
	}
	key := args[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	if stop {
		if !s.watchers.remove(key, req.Watcher) {
			return resp3.AppendInt(dst, 0) // protocol: STOP on a key not watched is :0
		}
		s.bytes -= registrationCost(len(key))
		return resp3.AppendSimpleString(dst, "OK")
	}
	if msg := s.watchChecked(key, req.Watcher); msg != "" {
		return appendErr(dst, msg)
	}
	return resp3.AppendSimpleString(dst, "OK")
}

// watchChecked registers w for a key that passed checkKey (KEYNOTIFY and the typed
// Watch), within MaxNotify and MaxBytes, and returns the error text of a refusal.
// Called with s.mu held.
func (s *Store) watchChecked(key []byte, w Watcher) string {
	if s.watchers.registered(key, w) {
		return "" // registering twice is one registration
	}
	// Registrations are bounded whether or not the key exists: each one holds
	// its key until STOP or the connection ends.
	if s.maxNotify > 0 && s.watchers.watching(w) >= s.maxNotify {
		return s.refuse(BoundNotify)
	}
	cost := registrationCost(len(key))
	if s.maxBytes > 0 && s.bytes+cost > s.maxBytes {
		return s.refuse(BoundBytes)
	}
	s.watchers.add(key, w)
	s.bytes += cost
	return ""
}

// parseFence parses and drift-checks the request's __ft when present.
func (s *Store) parseFence(req *Request) (hlc.Timestamp, string) {
	ft, msg := parseFenceToken(req)
	if msg != "" || !req.HasFencingToken {
		return ft, msg
	}
	if err := s.clock.CheckDrift(ft); err != nil {
		return ft, ErrTextFencingAhead
	}
	return ft, ""
}

// parseFenceToken parses the request's __ft when present.
func parseFenceToken(req *Request) (hlc.Timestamp, string) {
	if !req.HasFencingToken {
		return hlc.Timestamp{}, ""
	}
	ft, err := hlc.ParseString(req.FencingToken)
	if err != nil {
		return ft, ErrTextBadTimestamp
	}
	return ft, ""
}

// checkFence applies the document's fencing token algorithm to an existing
// key: a fenced key needs a token, and not an older one.
//
// Order of the checks on an existing key: a condition that refuses the
// request (SET NX on an existing key, SET NEX with another value, VDEL with
// another value) answers ":-1" before the fencing token is looked at; only a
// request that would change the key must pass checkFence. The protocol
// document orders neither, and neither the SDKs nor their integration tests
// against the real service (Azure/iot-operations-sdks) try a refused
// condition on a fenced key, so this order is our reading of:
//   - the document's fencing algorithm, which is about requests that write
//     ("If a SET request specified a __ft that has an older HLC value …
//     reject the request"): the token stops a stale holder from modifying
//     the key, and a refused condition modifies nothing;
//   - what ":-1" reveals (the key exists, its version in __ts, for NEX that
//     the value differs) is what GET returns with no token at all: the Rust
//     SDK's rust/azure_iot_operations_services/tests/state_store_client_test.rs
//     checks that GET needs no fencing token on a fenced key ("Tests 13");
//   - lease clients read ":-1" as "held by someone else" and an error as a
//     failure (the Go SDK's go/services/leasedlock/lease.go, Lease.try:
//     !res.Value is (false, nil), an error is (false, err)), and the same
//     Rust test file sets a NEX key with a fencing token
//     (state_store_key_set_conditions_2_network_tests): a contender without
//     the token should learn "not applied", not fail.
//
// Malformed or future tokens are still refused first (parseFence): those are
// bad requests whatever the key holds.
func checkFence(e *entry, req *Request, ft hlc.Timestamp) string {
	if e.fence == nil {
		return ""
	}
	if !req.HasFencingToken {
		return ErrTextFencingNeeded
	}
	if hlc.Compare(ft, *e.fence) < 0 {
		return ErrTextFencingLower
	}
	return ""
}

func appendErr(dst []byte, text string) []byte {
	dst = append(dst, "-ERR "...)
	dst = append(dst, text...)
	return append(dst, '\r', '\n')
}

// equalFold reports whether b equals the upper-case ASCII word s in either
// case, without allocating.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
