package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// call is one request waiting for its response. Calls are pooled: ch has room for the one
// result that whoever removes the call from Client.pending sends.
type call struct {
	ch     chan result
	cancel context.CancelFunc // aborts the PUBLISH when the link drops
}

// result is what the response handler hands to the waiting request.
type result struct {
	payload []byte        // the response payload (paho allocates it per packet; we keep views)
	version hlc.Timestamp // the response's __ts; zero when absent
	err     error
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan result, 1)} }}

// request is what one command adds to the PUBLISH beside its payload.
type request struct {
	payload []byte
	fencing hlc.Timestamp // __ft when not zero
	persist bool          // aio-persistence: true
	timeout time.Duration // 0: Options.Timeout
}

// invoke publishes one request and waits for its response. The correlation id is registered
// before the PUBLISH leaves because the response can beat the PUBACK (docs/design.md
// "Library facts").
func (c *Client) invoke(ctx context.Context, r request) (result, error) {
	timeout := r.timeout
	if timeout <= 0 {
		timeout = c.opts.Timeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return result{}, ErrTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Random correlation data from the runtime's ChaCha8 generator: unpredictable like
	// crypto/rand, without a getrandom system call per request.
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:8], mrand.Uint64())
	binary.LittleEndian.PutUint64(id[8:], mrand.Uint64())
	id[6] = id[6]&0x0f | 0x40 // a version 4 UUID, as the SDKs send
	id[8] = id[8]&0x3f | 0x80
	cl := callPool.Get().(*call)
	cl.cancel = cancel
	if err := c.register(rctx, id, cl); err != nil {
		cl.cancel = nil
		callPool.Put(cl)
		return result{}, err
	}

	pub := c.newPublish(id, r, timeout)
	if c.testMutate != nil {
		c.testMutate(pub)
	}
	pr, perr := c.cm.Publish(rctx, pub)
	if perr != nil && pr != nil && pr.ReasonCode == 0x87 {
		perr = fmt.Errorf("%w (PUBACK reason 0x87)", ErrNotAuthorized) // the broker's ACL refused the request
	}
	if perr == nil && pr != nil && pr.ReasonCode == 0x10 {
		// Nobody will ever answer: waiting out the timeout would only hide that no store is
		// subscribed (behind mosquitto, the store reconnects like any client after a restart).
		perr = ErrNoResponder
	}
	var res result
	if perr == nil {
		select {
		case res = <-cl.ch:
			c.release(cl)
			return res, res.err
		case <-rctx.Done():
		}
	}
	// No response (yet): take the call back; if someone else already took it, their result
	// is in the channel or on its way.
	c.mu.Lock()
	_, mine := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !mine {
		res = <-cl.ch
		c.release(cl)
		return res, res.err
	}
	c.release(cl)
	switch {
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return result{}, ctx.Err()
	case rctx.Err() != nil:
		return result{}, ErrTimeout
	default:
		return result{}, fmt.Errorf("store: publish request: %w", perr)
	}
}

func (c *Client) release(cl *call) {
	cl.cancel = nil
	callPool.Put(cl)
}

// register enters the call into pending once the client is ready; while the connection is
// being subscribed it waits (bounded by ctx, which carries the request's timeout), and fails
// with errLostBeforeSend if that connection drops; while it is down it fails at once.
func (c *Client) register(ctx context.Context, id [16]byte, cl *call) error {
	for {
		c.mu.Lock()
		switch c.state {
		case stateReady:
			c.pending[id] = cl
			c.mu.Unlock()
			return nil
		case stateClosed:
			c.mu.Unlock()
			return ErrClosed
		case stateDown:
			c.mu.Unlock()
			return ErrNotConnected
		}
		if c.readyErr != nil {
			err := c.readyErr
			c.mu.Unlock()
			return fmt.Errorf("%w: %w", ErrNotConnected, err)
		}
		ch, down := c.readyCh, c.downCh
		hook := c.testRegisterWait
		c.mu.Unlock()
		if hook != nil {
			hook()
		}
		select {
		case <-ch:
		case <-down:
			// The connection being subscribed dropped: fail now, as the requests in
			// flight do, rather than wait for a later connection.
			return errLostBeforeSend
		case <-c.ctx.Done(): // Close
			return ErrClosed
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ErrTimeout
			}
			return ctx.Err()
		}
	}
}

// failPendingLocked hands err to every waiting request. c.mu must be held.
func (c *Client) failPendingLocked(err error) {
	for id, cl := range c.pending {
		delete(c.pending, id)
		cancel := cl.cancel // read before the send: the waiter reuses cl once it has the result
		cl.ch <- result{err: err}
		if cancel != nil {
			cancel()
		}
	}
}

// newPublish builds the request PUBLISH with the properties the SDKs send (wire fact 9).
func (c *Client) newPublish(id [16]byte, r request, timeout time.Duration) *paho.Publish {
	expiry := uint32((timeout + time.Second - 1) / time.Second)
	user := make(paho.UserProperties, 0, 7)
	user = append(user,
		paho.UserProperty{Key: "__ts", Value: c.clock.Now().String()},
		paho.UserProperty{Key: "__protVer", Value: "1.0"},
		paho.UserProperty{Key: "__srcId", Value: c.opts.ClientID},
		paho.UserProperty{Key: "$partition", Value: c.opts.ClientID},
		paho.UserProperty{Key: "$high_priority", Value: ""},
	)
	if !r.fencing.IsZero() {
		user = append(user, paho.UserProperty{Key: "__ft", Value: r.fencing.String()})
	}
	if r.persist {
		user = append(user, paho.UserProperty{Key: "aio-persistence", Value: "true"})
	}
	return &paho.Publish{
		QoS:     1,
		Topic:   invokeTopic,
		Payload: r.payload,
		Properties: &paho.PublishProperties{
			CorrelationData: id[:],
			ContentType:     "application/octet-stream",
			ResponseTopic:   c.respTopic,
			MessageExpiry:   &expiry,
			User:            user,
		},
	}
}

// onPublish is the one PUBLISH handler (ClientConfig.OnPublishReceived). It runs on paho's
// goroutine one message at a time, so it only parses headers and hands over.
func (c *Client) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	switch {
	case p.Topic == c.respTopic:
		c.onResponse(p)
		return true, nil
	case len(p.Topic) > len(c.notifyPrefix) && p.Topic[:len(c.notifyPrefix)] == c.notifyPrefix:
		c.onNotify(p)
		return true, nil
	}
	return false, nil
}

func (c *Client) onResponse(p *paho.Publish) {
	if p.Properties == nil || len(p.Properties.CorrelationData) != 16 {
		return // not ours: every request carries 16 bytes
	}
	res := result{payload: p.Payload}
	res.version, res.err = c.observe(p.Properties.User)
	if res.err == nil {
		res.err = statusError(p.Properties.User, p.Payload)
	}
	id := [16]byte(p.Properties.CorrelationData)
	c.mu.Lock()
	cl, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		cl.ch <- res // never blocks: one result per call, channel of one
	}
}

// observe parses __ts and lets the shared clock see it, so the next request's __ts is later
// than every version the store has shown us.
func (c *Client) observe(user paho.UserProperties) (hlc.Timestamp, error) {
	for _, u := range user {
		if u.Key == "__ts" {
			ts, err := hlc.ParseString(u.Value)
			if err != nil {
				return hlc.Timestamp{}, fmt.Errorf("%w: bad __ts %q: %v", ErrProtocol, u.Value, err)
			}
			c.clock.Observe(ts)
			return ts, nil
		}
	}
	return hlc.Timestamp{}, nil
}

// statusError turns an RPC-level failure (__stat other than 2xx with no RESP payload, as the
// SDKs' protocol reports invoker errors) into an error; the normal case returns nil.
func statusError(user paho.UserProperties, payload []byte) error {
	if len(payload) > 0 {
		return nil
	}
	stat := user.Get("__stat")
	if stat == "" {
		return nil
	}
	n, err := strconv.Atoi(stat)
	if err != nil || n < 200 || n > 299 {
		return fmt.Errorf("%w: status %s: %s", ErrProtocol, stat, user.Get("__stMsg"))
	}
	return nil
}
