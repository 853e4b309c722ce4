package kv

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// Store is what the agent's parts need of a state store.
type Store interface {
	// Get returns key's value; found is false (with a nil error) when it is not stored.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	// Set stores value under key; expiry > 0 removes it that long after the write (PX).
	Set(ctx context.Context, key string, value []byte, expiry time.Duration) error
	// Watch signals on changed (capacity 1, coalescing) whenever key may have changed,
	// until stop is called.
	Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}

// Engine reaches the embedded broker's store engine in-process, through its typed API:
// the same store clients reach over MQTT, without a connection of its own (and so
// without TLS or credentials for the agent itself).
type Engine struct {
	Store *statestore.Store
	// Clock stamps each request (the store refuses a SET without a timestamp) and
	// observes the versions the store returns.
	Clock *hlc.Clock
}

var _ Store = Engine{}

// Get implements Store.
func (e Engine) Get(_ context.Context, key string) ([]byte, bool, error) {
	v, version, err := e.Store.Get(key)
	if errors.Is(err, statestore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, refusal(err)
	}
	e.Clock.Observe(version)
	return v, true, nil
}

// Set implements Store, as the store's owner (see the package doc).
func (e Engine) Set(_ context.Context, key string, value []byte, expiry time.Duration) error {
	version, err := e.Store.Set(key, value, statestore.SetOptions{Timestamp: e.Clock.Now(), Expiry: expiry, Owner: true})
	if err != nil {
		return refusal(err)
	}
	e.Clock.Observe(version)
	return nil
}

// Watch implements Store: an in-process statestore.Watcher registered for key alone.
func (e Engine) Watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	w := &signalWatcher{c: make(chan struct{}, 1)}
	if err := e.Store.Watch(key, w); err != nil {
		return nil, nil, refusal(err)
	}
	return w.c, func() { e.Store.Unwatch(w) }, nil
}

// refusal maps the engine's refusal to the agent/store error of the same text.
func refusal(err error) error {
	var e *statestore.Error
	if errors.As(err, &e) {
		return &store.ServerError{Text: e.Text}
	}
	return err
}

type signalWatcher struct{ c chan struct{} }

// Notify implements statestore.Watcher; it never blocks (the store is locked).
func (w *signalWatcher) Notify(string, statestore.Op, []byte, hlc.Timestamp) {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Client reaches a state store through an agent/store client (an external store).
type Client struct {
	C *store.Client
}

var _ Store = Client{}

// Get implements Store.
func (k Client) Get(ctx context.Context, key string) ([]byte, bool, error) {
	e, err := k.C.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	return e.Value, err == nil, err
}

// Set implements Store.
func (k Client) Set(ctx context.Context, key string, value []byte, expiry time.Duration) error {
	_, err := k.C.Set(ctx, key, value, &store.SetOptions{Expiry: expiry})
	return err
}

// Watch implements Store with agent/store's KEYNOTIFY watch, whose notifications (a
// Resync after a reconnect included) become signals.
func (k Client) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	w, err := k.C.KeyNotify(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case _, ok := <-w.C():
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, func() {
		close(done)
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.Stop(sctx)
		cancel()
		wg.Wait()
	}, nil
}
