package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// Lease errors.
var (
	// ErrLeaseHeld is returned by TryAcquire when another holder has the lease (it wraps
	// ErrNotApplied).
	ErrLeaseHeld = fmt.Errorf("store: lease held by another holder: %w", ErrNotApplied)
	// ErrLeaseLost is Lease.Err after the lease was taken away: the key was deleted or
	// written by someone else, a renewal was refused, or it could not be renewed in time.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrLeaseReleased is Lease.Err after Release.
	ErrLeaseReleased = errors.New("store: lease released")
)

// LeaseOptions configure a lease; nil means the defaults.
type LeaseOptions struct {
	// TTL is how long the lease lasts without renewal (PX). Default 10s.
	TTL time.Duration
	// RenewEvery is the renewal period. Default TTL/3, so two renewals can fail before the
	// lease runs out.
	RenewEvery time.Duration
	// Holder is the value stored under the lease's key. Default: the client id.
	Holder string
}

// Lease is a lock in the store (protocol: "Locking and fencing tokens"): the key name holds
// the holder's name with an expiry, taken and renewed with SET name holder NEX PX ttl,
// released with VDEL name holder. Its version is the fencing token for the keys it protects.
type Lease struct {
	c      *Client
	name   string
	holder string
	ttl    time.Duration
	every  time.Duration
	watch  *Watch

	mu      sync.Mutex
	token   hlc.Timestamp
	expires time.Time // local deadline: last successful renewal's send time + TTL
	err     error     // why the lease ended; nil while held

	lost chan struct{} // closed when the lease ends, for whatever reason
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func (o *LeaseOptions) withDefaults(c *Client) LeaseOptions {
	var l LeaseOptions
	if o != nil {
		l = *o
	}
	if l.TTL <= 0 {
		l.TTL = 10 * time.Second
	}
	if l.RenewEvery <= 0 || l.RenewEvery >= l.TTL {
		l.RenewEvery = l.TTL / 3
	}
	if l.Holder == "" {
		l.Holder = c.opts.ClientID
	}
	return l
}

// TryAcquire takes the lease name once. It returns ErrLeaseHeld when someone else holds it.
// The returned Lease renews itself until Release or until it is lost.
func (c *Client) TryAcquire(ctx context.Context, name string, opts *LeaseOptions) (*Lease, error) {
	o := opts.withDefaults(c)
	// Watch first, so a takeover right after the SET is not missed.
	w, err := c.KeyNotify(ctx, name)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	v, err := c.Set(ctx, name, []byte(o.Holder), &SetOptions{Condition: NotExistsOrEqual, Expiry: o.TTL})
	if err != nil {
		_ = w.Stop(context.WithoutCancel(ctx))
		if errors.Is(err, ErrNotApplied) {
			return nil, ErrLeaseHeld
		}
		return nil, err
	}
	l := &Lease{c: c, name: name, holder: o.Holder, ttl: o.TTL, every: o.RenewEvery, watch: w,
		token: v, expires: sent.Add(o.TTL), lost: make(chan struct{}), stop: make(chan struct{})}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

// Acquire waits until it holds the lease or ctx ends. It waits for the key's DELETE
// notification (an expiry sends one, wire fact 12) and tries again at least once a TTL.
func (c *Client) Acquire(ctx context.Context, name string, opts *LeaseOptions) (*Lease, error) {
	o := opts.withDefaults(c)
	w, err := c.KeyNotify(ctx, name)
	if err != nil {
		return nil, err
	}
	defer w.Stop(context.WithoutCancel(ctx))
	for {
		l, err := c.TryAcquire(ctx, name, &o)
		if !errors.Is(err, ErrLeaseHeld) && !Retryable(err) {
			return l, err
		}
		t := time.NewTimer(o.TTL)
	wait:
		for {
			select {
			case n, ok := <-w.C():
				if !ok {
					t.Stop()
					return nil, ErrClosed
				}
				if n.Op == OpDelete {
					break wait
				}
			case <-t.C:
				break wait
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		t.Stop()
	}
}

// LeaseHolder returns who holds the lease name and the lease's version; ErrNotFound when
// nobody does.
func (c *Client) LeaseHolder(ctx context.Context, name string) (string, hlc.Timestamp, error) {
	e, err := c.Get(ctx, name)
	if err != nil {
		return "", hlc.Timestamp{}, err
	}
	return string(e.Value), e.Version, nil
}

// ObserveLease watches the lease name: a SET notification carries the new holder, a DELETE
// says it is free.
func (c *Client) ObserveLease(ctx context.Context, name string) (*Watch, error) {
	return c.KeyNotify(ctx, name)
}

// Name returns the lease's key.
func (l *Lease) Name() string { return l.name }

// Holder returns the value this lease stores under its key.
func (l *Lease) Holder() string { return l.holder }

// Token returns the fencing token: the version of the lease's latest successful SET.
func (l *Lease) Token() hlc.Timestamp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Lost is closed the moment the lease ends: taken away, not renewed in time, released, or
// the client closed. Err says which.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil while the lease is held, then ErrLeaseLost (wrapping the cause),
// ErrLeaseReleased or ErrClosed.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Edit reads key, lets fn compute its new value from the old one (found is false when the key
// does not exist), and writes it with the lease's fencing token, so a holder that lost the
// lease without knowing it cannot overwrite its successor's writes. fn returning an error
// aborts the edit. Edit returns the new version.
func (l *Lease) Edit(ctx context.Context, key string, fn func(old []byte, found bool) ([]byte, error)) (hlc.Timestamp, error) {
	if err := l.Err(); err != nil {
		return hlc.Timestamp{}, err
	}
	e, err := l.c.Get(ctx, key)
	found := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return hlc.Timestamp{}, err
	}
	value, err := fn(e.Value, found)
	if err != nil {
		return hlc.Timestamp{}, err
	}
	return l.c.Set(ctx, key, value, &SetOptions{FencingToken: l.Token()})
}

// Release stops renewing and deletes the lease's key if it still holds this holder (VDEL).
func (l *Lease) Release(ctx context.Context) error {
	l.end(ErrLeaseReleased)
	l.wg.Wait() // run stopped the watch
	_, err := l.c.VDel(ctx, l.name, []byte(l.holder), nil)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotApplied) {
		return nil // expired or taken over already: nothing of ours to delete
	}
	return err
}

// end records why the lease ended and signals Lost; the first reason wins.
func (l *Lease) end(why error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = why
		l.mu.Unlock()
		close(l.lost)
		close(l.stop)
	})
}

// run renews the lease and watches its key until it ends.
func (l *Lease) run() {
	defer l.wg.Done()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.every)
		_ = l.watch.Stop(ctx)
		cancel()
	}()
	renew := time.NewTimer(l.every)
	defer renew.Stop()
	l.mu.Lock()
	expiry := time.NewTimer(time.Until(l.expires))
	l.mu.Unlock()
	defer expiry.Stop()
	for {
		select {
		case <-l.stop:
			return
		case n, ok := <-l.watch.C():
			switch {
			case ok && !n.Version.IsZero() && hlc.Compare(n.Version, l.Token()) < 0:
				// a change from before this holder's SET, delivered late: not news
			case !ok:
				l.end(fmt.Errorf("%w: %w", ErrLeaseLost, ErrClosed))
				return
			case n.Op == OpDelete:
				l.end(fmt.Errorf("%w: the key was deleted", ErrLeaseLost))
				return
			case string(n.Value) != l.holder:
				l.end(fmt.Errorf("%w: taken by %q", ErrLeaseLost, n.Value))
				return
			}
		case <-expiry.C:
			l.end(fmt.Errorf("%w: not renewed within %v", ErrLeaseLost, l.ttl))
			return
		case <-renew.C:
			sent := time.Now()
			// The renewal blocks this loop, so it must not outlive the lease: otherwise a
			// renewal hanging on a dead link would hold back the loss (expiry timer or
			// DELETE notification) for up to RenewEvery, while the holder still acts.
			deadline := sent.Add(l.every)
			l.mu.Lock()
			if l.expires.Before(deadline) {
				deadline = l.expires
			}
			l.mu.Unlock()
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			v, err := l.c.Set(ctx, l.name, []byte(l.holder), &SetOptions{Condition: NotExistsOrEqual, Expiry: l.ttl})
			cancel()
			switch {
			case err == nil:
				l.mu.Lock()
				l.token, l.expires = v, sent.Add(l.ttl)
				l.mu.Unlock()
				expiry.Reset(time.Until(sent.Add(l.ttl)))
				renew.Reset(l.every)
			case errors.Is(err, ErrNotApplied):
				l.end(fmt.Errorf("%w: renewal refused, another holder has it", ErrLeaseLost))
				return
			case errors.Is(err, ErrClosed):
				l.end(ErrClosed)
				return
			default: // link trouble: try again soon; the expiry timer bounds the attempts
				renew.Reset(max(l.every/4, 10*time.Millisecond))
			}
		}
	}
}
