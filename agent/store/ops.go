package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Entry is a stored value and its version.
type Entry struct {
	// Value is a view into the response payload, which the client never touches again: the
	// caller owns it.
	Value   []byte
	Version hlc.Timestamp
}

// Condition is the SET condition (protocol: "SET options").
type Condition int

const (
	// Always sets the key unconditionally.
	Always Condition = iota
	// NotExists sets the key only if it does not exist (NX).
	NotExists
	// NotExistsOrEqual sets the key if it does not exist or already holds the same value
	// (NEX, which takes no argument: the SET's own value is compared, wire fact 2). This is
	// how a lease is taken and renewed.
	NotExistsOrEqual
)

// SetOptions are the options of Set; nil means an unconditional SET without expiry.
type SetOptions struct {
	Condition Condition
	// Expiry is the key's time to live (PX, whole milliseconds); 0 keeps it forever.
	Expiry time.Duration
	// FencingToken, when not zero, is sent as __ft; a key written with one afterwards
	// requires an equal or newer token for SET, DEL and VDEL.
	FencingToken hlc.Timestamp
	// Persist asks the store to keep the key on disk across its restarts (aio-persistence).
	Persist bool
	// Timeout overrides Options.Timeout for this request.
	Timeout time.Duration
}

// DelOptions are the options of Del and VDel; nil means none.
type DelOptions struct {
	// FencingToken is required when the key is protected by one.
	FencingToken hlc.Timestamp
	// Timeout overrides Options.Timeout for this request.
	Timeout time.Duration
}

// Get returns the key's value and version, or ErrNotFound.
func (c *Client) Get(ctx context.Context, key string) (Entry, error) {
	var buf [64]byte
	p := appendCommand(buf[:0], "GET", key)
	res, err := c.invoke(ctx, request{payload: p})
	if err != nil {
		return Entry{}, err
	}
	v, err := parseReply(res.payload)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case v.IsNull():
		return Entry{}, ErrNotFound
	case v.Kind == resp3.BlobString:
		return Entry{Value: v.Str, Version: res.version}, nil
	}
	return Entry{}, unexpected("GET", v)
}

// Set stores value under key and returns the new version. When a condition keeps the store
// from writing it returns ErrNotApplied and the version of the value that is stored.
func (c *Client) Set(ctx context.Context, key string, value []byte, opts *SetOptions) (hlc.Timestamp, error) {
	if opts == nil {
		opts = &SetOptions{}
	}
	n := 3
	switch opts.Condition {
	case NotExists, NotExistsOrEqual:
		n++
	}
	if opts.Expiry > 0 {
		n += 2
	}
	p := make([]byte, 0, 64+len(key)+len(value))
	p = resp3.AppendArrayHeader(p, n)
	p = resp3.AppendBlobString(p, "SET")
	p = resp3.AppendBlobString(p, key)
	p = resp3.AppendBlob(p, value)
	switch opts.Condition {
	case NotExists:
		p = resp3.AppendBlobString(p, "NX")
	case NotExistsOrEqual:
		p = resp3.AppendBlobString(p, "NEX")
	}
	if opts.Expiry > 0 {
		ms := max(opts.Expiry.Milliseconds(), 1)
		var num [20]byte
		p = resp3.AppendBlobString(p, "PX")
		p = resp3.AppendBlob(p, strconv.AppendInt(num[:0], ms, 10))
	}
	res, err := c.invoke(ctx, request{payload: p, fencing: opts.FencingToken, persist: opts.Persist, timeout: opts.Timeout})
	if err != nil {
		return hlc.Timestamp{}, err
	}
	v, err := parseReply(res.payload)
	if err != nil {
		return res.version, err
	}
	switch {
	case v.Kind == resp3.SimpleString && string(v.Str) == "OK":
		return res.version, nil
	case v.Kind == resp3.Integer && v.Int == -1:
		return res.version, ErrNotApplied // wire fact 1: carries the stored value's version
	}
	return hlc.Timestamp{}, unexpected("SET", v)
}

// Del deletes key and returns the deleted value's version; ErrNotFound when it did not exist.
func (c *Client) Del(ctx context.Context, key string, opts *DelOptions) (hlc.Timestamp, error) {
	if opts == nil {
		opts = &DelOptions{}
	}
	var buf [64]byte
	p := appendCommand(buf[:0], "DEL", key)
	return c.del(ctx, "DEL", p, opts)
}

// VDel deletes key only if it holds value (the release of a lease). It returns ErrNotApplied
// when the key holds another value and ErrNotFound when it does not exist.
func (c *Client) VDel(ctx context.Context, key string, value []byte, opts *DelOptions) (hlc.Timestamp, error) {
	if opts == nil {
		opts = &DelOptions{}
	}
	p := make([]byte, 0, 48+len(key)+len(value))
	p = resp3.AppendArrayHeader(p, 3)
	p = resp3.AppendBlobString(p, "VDEL")
	p = resp3.AppendBlobString(p, key)
	p = resp3.AppendBlob(p, value)
	return c.del(ctx, "VDEL", p, opts)
}

func (c *Client) del(ctx context.Context, verb string, p []byte, opts *DelOptions) (hlc.Timestamp, error) {
	res, err := c.invoke(ctx, request{payload: p, fencing: opts.FencingToken, timeout: opts.Timeout})
	if err != nil {
		return hlc.Timestamp{}, err
	}
	v, err := parseReply(res.payload)
	if err != nil {
		return hlc.Timestamp{}, err
	}
	if v.Kind == resp3.Integer {
		switch v.Int {
		case 1:
			return res.version, nil
		case 0:
			return hlc.Timestamp{}, ErrNotFound
		case -1:
			return res.version, ErrNotApplied
		}
	}
	return hlc.Timestamp{}, unexpected(verb, v)
}

// keyNotify sends KEYNOTIFY key [STOP]. STOP of a key not watched answers ":0" (wire fact 1),
// returned as ErrNotFound.
func (c *Client) keyNotify(ctx context.Context, key string, stop bool) error {
	var buf [96]byte
	p := buf[:0]
	if stop {
		p = resp3.AppendArrayHeader(p, 3)
	} else {
		p = resp3.AppendArrayHeader(p, 2)
	}
	p = resp3.AppendBlobString(p, "KEYNOTIFY")
	p = resp3.AppendBlobString(p, key)
	if stop {
		p = resp3.AppendBlobString(p, "STOP")
	}
	res, err := c.invoke(ctx, request{payload: p})
	if err != nil {
		return err
	}
	v, err := parseReply(res.payload)
	if err != nil {
		return err
	}
	switch {
	case v.Kind == resp3.SimpleString && string(v.Str) == "OK":
		return nil
	case v.Kind == resp3.Integer && v.Int == 0:
		return ErrNotFound
	}
	return unexpected("KEYNOTIFY", v)
}

// appendCommand encodes a two-element command: VERB key.
func appendCommand(dst []byte, verb, key string) []byte {
	dst = resp3.AppendArrayHeader(dst, 2)
	dst = resp3.AppendBlobString(dst, verb)
	return resp3.AppendBlobString(dst, key)
}

// parseReply reads the single RESP3 value of a response. Errors become their sentinels;
// nothing is allocated except on the error paths.
func parseReply(payload []byte) (resp3.Value, error) {
	v, rest, err := resp3.ReadValue(payload)
	if err != nil {
		return v, fmt.Errorf("%w: response %q: %v", ErrProtocol, clip(payload), err)
	}
	if v.Kind == resp3.SimpleError || v.Kind == resp3.BlobError {
		return v, serverError(v.Str)
	}
	if len(rest) != 0 {
		return v, fmt.Errorf("%w: %d bytes after the response value", ErrProtocol, len(rest))
	}
	return v, nil
}

func unexpected(verb string, v resp3.Value) error {
	return fmt.Errorf("%w: unexpected %s response of type %q", ErrProtocol, verb, byte(v.Kind))
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
