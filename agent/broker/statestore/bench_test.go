package statestore

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

func benchStore(b testing.TB) *Store {
	s, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func nowTS() string { return hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "client"}.String() }

// TestGetAndSetAllocations pins the engine's allocation budget: GET none,
// SET of an existing key only the copy of the value it stores.
func TestGetAndSetAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts differ under -cover and -race")
	}
	s := benchStore(t)
	defer s.Close()
	set := setReq(nowTS(), "device/0001/state", "0123456789abcdef0123456789abcdef")
	get := &Request{Payload: cmd("GET", "device/0001/state")}
	dst := make([]byte, 0, 256)
	s.Do(set, dst[:0])
	if n := testing.AllocsPerRun(1000, func() { s.Do(get, dst[:0]) }); n != 0 {
		t.Errorf("GET allocates %.1f times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { s.Do(set, dst[:0]) }); n > 1 {
		t.Errorf("SET allocates %.1f times, want at most 1", n)
	}
}

func BenchmarkEngineGET(b *testing.B) {
	s := benchStore(b)
	defer s.Close()
	s.Do(setReq(nowTS(), "device/0001/state", "0123456789abcdef0123456789abcdef"), nil)
	get := &Request{Payload: cmd("GET", "device/0001/state"), Timestamp: nowTS(), HasTimestamp: true}
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(get.Payload)))
	for b.Loop() {
		dst, _ = s.Do(get, dst[:0])
	}
}

func BenchmarkEngineSET(b *testing.B) {
	s := benchStore(b)
	defer s.Close()
	set := setReq(nowTS(), "device/0001/state", "0123456789abcdef0123456789abcdef")
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(set.Payload)))
	for b.Loop() {
		dst, _ = s.Do(set, dst[:0])
	}
}

func BenchmarkEngineSETNotify(b *testing.B) {
	s := benchStore(b)
	defer s.Close()
	s.Do(&Request{Payload: cmd("KEYNOTIFY", "device/0001/state"), Watcher: discardWatcher{}}, nil)
	set := setReq(nowTS(), "device/0001/state", "0123456789abcdef0123456789abcdef", "PX", "60000")
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = s.Do(set, dst[:0])
	}
}

type discardWatcher struct{}

func (discardWatcher) Notify(string, Op, []byte, hlc.Timestamp) {}

// BenchmarkMemoryPerKey stores many 16-byte keys with 64-byte values and
// reports the heap bytes per key beyond those 80 payload bytes.
func BenchmarkMemoryPerKey(b *testing.B) {
	const keys = 200_000
	value := make([]byte, 64)
	payloads := make([][]byte, keys)
	for i := range payloads {
		payloads[i] = cmd("SET", fmt.Sprintf("key-%011d", i), string(value))
	}
	ts := nowTS()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := benchStore(b)
		req := &Request{Timestamp: ts, HasTimestamp: true}
		for _, p := range payloads {
			req.Payload = p
			s.Do(req, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != keys {
			b.Fatalf("stored %d keys", s.Len())
		}
		perKey := float64(after.HeapAlloc-before.HeapAlloc) / keys
		b.ReportMetric(perKey, "B/key")
		b.ReportMetric(perKey-80, "overhead-B/key")
		runtime.KeepAlive(payloads)
		s.Close()
	}
}

// BenchmarkMemoryPerRegistration registers many watchers (connections) for
// 16-byte keys that do not exist, 8 keys each, and reports the heap bytes per
// registration beyond the key bytes: what RegistrationOverhead must cover.
func BenchmarkMemoryPerRegistration(b *testing.B) {
	const watchers, each = 25_000, 8
	payloads := make([][]byte, watchers*each)
	for i := range payloads {
		payloads[i] = cmd("KEYNOTIFY", fmt.Sprintf("key-%011d", i))
	}
	ws := make([]*countingWatcher, watchers)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := benchStore(b)
		req := &Request{}
		for i, p := range payloads {
			if i%each == 0 {
				ws[i/each] = &countingWatcher{}
			}
			req.Payload, req.Watcher = p, ws[i/each]
			s.Do(req, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if st := s.Stats(); st.Registrations != len(payloads) {
			b.Fatalf("%d registrations", st.Registrations)
		}
		per := float64(after.HeapAlloc-before.HeapAlloc-uint64(watchers*8)) / float64(len(payloads))
		b.ReportMetric(per, "B/registration")
		b.ReportMetric(per-16, "overhead-B/registration")
		runtime.KeepAlive(payloads)
		s.Close()
	}
}

type countingWatcher struct{ n int }

func (w *countingWatcher) Notify(string, Op, []byte, hlc.Timestamp) { w.n++ }

// BenchmarkMemoryPerWaitingChange changes one watched persistent key many times while no
// snapshot can be written (its directory is gone), each change a DoDurable request, and
// reports the heap bytes per change beyond the value each notification keeps: the deferred
// notification and the answer waiting, which DeferredOverhead and WaiterOverhead must cover
// together (the caller's done is a function without state here).
func BenchmarkMemoryPerWaitingChange(b *testing.B) {
	const changes = 20_000
	value := make([]byte, 64)
	done := func([]byte, hlc.Timestamp, error) {}
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		s, err := New(&Options{SnapshotPath: filepath.Join(dir, "s")})
		if err != nil {
			b.Fatal(err)
		}
		s.Do(&Request{Payload: cmd("KEYNOTIFY", "cfg"), Watcher: &countingWatcher{}}, nil)
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		payload := cmd("SET", "cfg", string(value))
		ts := nowTS()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range changes {
			s.DoDurable(&Request{Payload: payload, Timestamp: ts, HasTimestamp: true, Persist: true}, nil, done)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		s.mu.Lock()
		if len(s.deferred) != changes || len(s.waiters) != changes {
			b.Fatalf("%d notifications and %d answers wait, want %d each", len(s.deferred), len(s.waiters), changes)
		}
		s.mu.Unlock()
		perChange := float64(after.HeapAlloc-before.HeapAlloc) / changes
		b.ReportMetric(perChange, "B/change")
		b.ReportMetric(perChange-float64(len(value)), "overhead-B/change")
		s.Close()
	}
}

// BenchmarkOwnerWrite: one device-state write of the store's owner (a 150-byte value
// with PX), through the typed Set, against the same write encoded as a RESP3 command
// and its reply parsed, as a client without the typed API does.
func BenchmarkOwnerWrite(b *testing.B) {
	value := make([]byte, 150)
	clock := hlc.NewClock("agent")
	b.Run("typed", func(b *testing.B) {
		s := benchStore(b)
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			v, err := s.Set("faceagent/gw/devices/d1", value, SetOptions{Timestamp: clock.Now(), Expiry: 90 * time.Second, Owner: true})
			if err != nil {
				b.Fatal(err)
			}
			clock.Observe(v)
		}
	})
	b.Run("resp3", func(b *testing.B) {
		s := benchStore(b)
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			c := resp3.AppendArrayHeader(nil, 5)
			c = resp3.AppendBlobString(c, "SET")
			c = resp3.AppendBlobString(c, "faceagent/gw/devices/d1")
			c = resp3.AppendBlob(c, value)
			c = resp3.AppendBlobString(c, "PX")
			c = resp3.AppendBlobString(c, strconv.FormatInt(90_000, 10))
			reply, v := s.Do(&Request{Payload: c, Timestamp: clock.Now().String(), HasTimestamp: true, Owner: true}, nil)
			if r, _, err := resp3.ReadValue(reply); err != nil || r.Kind != resp3.SimpleString {
				b.Fatalf("%q", reply)
			}
			clock.Observe(v)
		}
	})
}
