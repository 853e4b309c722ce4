package statestore

import (
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Op is the operation a KEYNOTIFY notification reports.
type Op uint8

const (
	// OpSet: the key was set; the notification payload is
	// "*4 NOTIFY SET VALUE <value>" (wire fact 3).
	OpSet Op = iota + 1
	// OpDelete: the key was removed by DEL, VDEL or PX expiry; the payload is
	// "*2 NOTIFY DELETE" (wire fact 3; the document says DEL).
	OpDelete
)

// String returns the operation as the notification payload spells it.
func (o Op) String() string {
	switch o {
	case OpSet:
		return "SET"
	case OpDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// Watcher receives the notifications of the keys it registered with
// KEYNOTIFY. It is compared with == (use a pointer), one per connection.
type Watcher interface {
	// Notify is called with the store locked, after the change is applied
	// (and, for a change of a persistent key, once it is on disk: see
	// doc.go, "Persistence"), in version order per key. It must not block.
	// value is the stored value, which the store never modifies: it may be
	// kept without copying, but not modified. value is nil for OpDelete.
	Notify(key string, op Op, value []byte, version hlc.Timestamp)
}

// watchRegistry maps keys to the watchers that registered them, and each
// watcher to its keys so that Unwatch is proportional to what it watched. A
// key's string is allocated once, by its first registration, and shared by
// every later one.
type watchRegistry struct {
	byKey     map[string]*keyWatchers
	byWatcher map[Watcher]map[string]struct{}
	count     int // registrations
}

type keyWatchers struct {
	key      string // the one copy of the key the registrations share
	watchers []Watcher
}

func newWatchRegistry() watchRegistry {
	return watchRegistry{
		byKey:     make(map[string]*keyWatchers),
		byWatcher: make(map[Watcher]map[string]struct{}),
	}
}

func (r *watchRegistry) has(key string) bool { return r.byKey[key] != nil }

func (r *watchRegistry) notify(key string, op Op, value []byte, version hlc.Timestamp) {
	if kw := r.byKey[key]; kw != nil {
		for _, w := range kw.watchers {
			w.Notify(key, op, value, version)
		}
	}
}

// registered reports whether w registered key.
func (r *watchRegistry) registered(key []byte, w Watcher) bool {
	_, ok := r.byWatcher[w][string(key)]
	return ok
}

// watching returns the number of keys w registered.
func (r *watchRegistry) watching(w Watcher) int { return len(r.byWatcher[w]) }

// add registers w for key; registering twice is one registration.
func (r *watchRegistry) add(key []byte, w Watcher) {
	keys := r.byWatcher[w]
	if keys == nil {
		keys = make(map[string]struct{})
		r.byWatcher[w] = keys
	}
	if _, ok := keys[string(key)]; ok {
		return
	}
	kw := r.byKey[string(key)]
	if kw == nil {
		kw = &keyWatchers{key: string(key)}
		r.byKey[kw.key] = kw
	}
	keys[kw.key] = struct{}{}
	kw.watchers = append(kw.watchers, w)
	r.count++
}

// remove drops w's registration for key and reports whether there was one.
func (r *watchRegistry) remove(key []byte, w Watcher) bool {
	keys := r.byWatcher[w]
	if _, ok := keys[string(key)]; !ok {
		return false
	}
	delete(keys, string(key))
	if len(keys) == 0 {
		delete(r.byWatcher, w)
	}
	r.dropFromKey(string(key), w)
	return true
}

func (r *watchRegistry) dropFromKey(key string, w Watcher) {
	kw := r.byKey[key]
	if kw == nil {
		return
	}
	list := kw.watchers
	for i, x := range list {
		if x == w {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			r.count--
			break
		}
	}
	if len(list) == 0 {
		delete(r.byKey, key)
	} else {
		kw.watchers = list
	}
}

// removeAll drops every registration of w and returns how many there were
// and what they counted against MaxBytes.
func (r *watchRegistry) removeAll(w Watcher) (n int, cost int64) {
	keys := r.byWatcher[w]
	for key := range keys {
		r.dropFromKey(key, w)
		cost += registrationCost(len(key))
	}
	delete(r.byWatcher, w)
	return len(keys), cost
}

// Unwatch drops every KEYNOTIFY registration of w (its connection closed or
// was taken over) and returns how many there were. Notifications already
// handed to w are not recalled.
func (s *Store) Unwatch(w Watcher) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, cost := s.watchers.removeAll(w)
	s.bytes -= cost
	return n
}

// Watching returns the number of keys w is registered for.
func (s *Store) Watching(w Watcher) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchers.watching(w)
}

// AppendNotification appends the RESP3 notification payload for op (wire
// fact 3) to dst.
func AppendNotification(dst []byte, op Op, value []byte) []byte {
	if op == OpSet {
		dst = append(dst, "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n"...)
		return resp3.AppendBlob(dst, value)
	}
	return append(dst, "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"...)
}
