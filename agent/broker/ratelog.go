package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Log policy (doc.go, "Logs"): a line a client can cause says which client, which packet
// type and why, and nothing a client sent (payloads, values, passwords, whole packets), and
// one cause is logged at most once a LogEvery. A client that sends a thousand refused packets
// a second costs one line a second, not a thousand of three megabytes each.
const (
	// LogEvery is how often one reason is logged at most; the lines held back meanwhile
	// are counted in the next line of that reason ("suppressed").
	LogEvery = time.Second
	// logMaxReasons bounds the reasons whose last line the limiter remembers; reasons
	// beyond it (while all are recent) share one slot.
	logMaxReasons = 64
	// logMaxValue bounds a string value in a line (client ids and topics may be 64 KiB).
	logMaxValue = 256
	// logMaxReasonKey bounds how much of an error message tells reasons apart.
	logMaxReasonKey = 96
	// logForgetAfter: a reason with lines held back that has not come again for this long
	// gives its slot up (their count unreported), so that reasons that came and went cannot
	// keep every slot taken.
	logForgetAfter = time.Minute
)

// logLimiter remembers when each reason was last logged and how many lines of it were held
// back since. One is shared by every logger derived from it.
type logLimiter struct {
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	reasons map[string]*logReason
}

type logReason struct {
	last       time.Time
	suppressed int
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, now: time.Now, reasons: make(map[string]*logReason)}
}

// overflowReason is the slot shared by reasons beyond logMaxReasons.
const overflowReason = "\x00other reasons"

// allow reports whether a line of reason may be written now, and how many lines of it were
// held back since the last one written.
func (l *logLimiter) allow(reason string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reasons[reason]
	if r == nil {
		if len(l.reasons) >= logMaxReasons {
			l.prune(now)
		}
		if len(l.reasons) >= logMaxReasons {
			reason = overflowReason
			r = l.reasons[reason]
		}
		if r == nil {
			r = &logReason{}
			l.reasons[reason] = r
			r.last = now
			return true, 0
		}
	}
	if now.Sub(r.last) < l.every {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}

// prune forgets reasons last logged more than an interval ago with nothing held back, and
// those with lines held back that have not come again for logForgetAfter.
func (l *logLimiter) prune(now time.Time) {
	for k, r := range l.reasons {
		if age := now.Sub(r.last); age >= l.every && (r.suppressed == 0 || age >= max(logForgetAfter, l.every)) {
			delete(l.reasons, k)
		}
	}
}

// limitedHandler passes records to next through a logLimiter and clips what they carry:
// string values longer than logMaxValue bytes are cut, and values of other types that are
// not numbers, booleans, times, errors or log valuers (byte slices, packets, structs) are
// replaced by their type, so a payload can never be printed byte by byte.
//
// Records about a client (with a "client" attribute, bound or their own) are limited per
// reason: the message and the "error", "err" or "reason" attribute. Other records (start,
// stop, storage errors) pass unlimited unless all is set.
type limitedHandler struct {
	next   slog.Handler
	lim    *logLimiter
	all    bool
	client bool
	groups bool // WithGroup was called: attributes below are not the record's own
}

// newLimitedLogger wraps log. all limits every record, not only those about a client (for
// a part whose every line a client can cause, such as the listener's).
func newLimitedLogger(log *slog.Logger, lim *logLimiter, all bool) *slog.Logger {
	h := log.Handler()
	if lh, ok := h.(*limitedHandler); ok {
		c := *lh
		c.all = c.all || all
		return slog.New(&c)
	}
	return slog.New(&limitedHandler{next: h, lim: lim, all: all})
}

func (h *limitedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *limitedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	clipped := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clipped[i] = clipAttr(a)
		if a.Key == "client" && !h.groups {
			c.client = true
		}
	}
	c.next = h.next.WithAttrs(clipped)
	return &c
}

func (h *limitedHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.groups = c.groups || name != ""
	return &c
}

func (h *limitedHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	limited := h.all || h.client
	reason := ""
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "client":
			limited = true
		case "error", "err", "reason":
			if reason == "" {
				reason = clipString(valueString(a.Value), logMaxReasonKey)
			}
		}
		out.AddAttrs(clipAttr(a))
		return true
	})
	if limited {
		ok, suppressed := h.lim.allow(r.Message + "\x00" + reason)
		if !ok {
			return nil
		}
		if suppressed > 0 {
			out.AddAttrs(slog.Int("suppressed", suppressed))
		}
	}
	return h.next.Handle(ctx, out)
}

// clipAttr returns a with its value clipped (see limitedHandler).
func clipAttr(a slog.Attr) slog.Attr {
	a.Value = clipValue(a.Value.Resolve())
	return a
}

func clipValue(v slog.Value) slog.Value {
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); len(s) > logMaxValue {
			return slog.StringValue(clipString(s, logMaxValue))
		}
		return v
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, a := range attrs {
			out[i] = clipAttr(a)
		}
		return slog.GroupValue(out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.StringValue(clipString(x.Error(), logMaxValue))
		case fmt.Stringer:
			return slog.StringValue(clipString(x.String(), logMaxValue))
		case []byte:
			return slog.StringValue("[" + strconv.Itoa(len(x)) + " bytes]")
		default:
			return slog.StringValue(fmt.Sprintf("%T", x))
		}
	}
	return v // numbers, booleans, durations, times
}

func valueString(v slog.Value) string {
	v = v.Resolve()
	if v.Kind() == slog.KindAny {
		if err, ok := v.Any().(error); ok {
			return err.Error()
		}
	}
	if v.Kind() == slog.KindString {
		return v.String()
	}
	return ""
}

// clipString cuts s to at most max bytes on a rune boundary, saying how long it was.
func clipString(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
