package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds metric families and writes them in the Prometheus text exposition format
// (version 0.0.4). The zero value is not usable; call NewRegistry. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families []*family
	names    map[string]bool
	onScrape []func()
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{names: map[string]bool{}} }

type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

type family struct {
	name, help string
	kind       kind
	label      string // "" for an unlabelled family

	mu     sync.Mutex
	series map[string]series // label value -> series
	fn     func() float64    // GaugeFunc
}

type series interface {
	write(w *strings.Builder, name, labels string)
}

// validName reports whether s is a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or, with
// colon false, a label name ([a-zA-Z_][a-zA-Z0-9_]*).
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || colon && c == ':' || i > 0 && '0' <= c && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

func (r *Registry) add(name, help string, k kind, label string) *family {
	if !validName(name, true) || (label != "" && (!validName(label, false) || strings.HasPrefix(label, "__"))) {
		panic(fmt.Sprintf("metrics: invalid name %q or label %q", name, label)) // a programming error
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[name] {
		panic("metrics: duplicate metric " + name)
	}
	r.names[name] = true
	f := &family{name: name, help: help, kind: k, label: label, series: map[string]series{}}
	r.families = append(r.families, f)
	return f
}

func (f *family) get(value string, mk func() series) series {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.series[value]
	if !ok {
		s = mk()
		f.series[value] = s
	}
	return s
}

// Delete removes the series with the given label value (a device that left the config).
func (f *family) delete(value string) {
	f.mu.Lock()
	delete(f.series, value)
	f.mu.Unlock()
}

// Counter is a monotonically increasing count.
type Counter struct{ v atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Value returns the count.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Set sets the count, for mirroring a count another component keeps (the outbox's
// per-device counters). The caller keeps it monotonic.
func (c *Counter) Set(n uint64) { c.v.Store(n) }

func (c *Counter) write(w *strings.Builder, name, labels string) {
	w.WriteString(name)
	w.WriteString(labels)
	w.WriteByte(' ')
	w.WriteString(strconv.FormatUint(c.v.Load(), 10))
	w.WriteByte('\n')
}

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Value returns the value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func (g *Gauge) write(w *strings.Builder, name, labels string) {
	w.WriteString(name)
	w.WriteString(labels)
	w.WriteByte(' ')
	w.WriteString(formatFloat(g.Value()))
	w.WriteByte('\n')
}

// NewCounter registers an unlabelled counter. Names follow Prometheus conventions
// (faceagent_tasks_total); an invalid or duplicate name panics.
func (r *Registry) NewCounter(name, help string) *Counter {
	f := r.add(name, help, kindCounter, "")
	return f.get("", func() series { return new(Counter) }).(*Counter)
}

// NewGauge registers an unlabelled gauge.
func (r *Registry) NewGauge(name, help string) *Gauge {
	f := r.add(name, help, kindGauge, "")
	return f.get("", func() series { return new(Gauge) }).(*Gauge)
}

// NewGaugeFunc registers a gauge whose value fn returns at scrape time. fn must be cheap
// and must not block: it runs inside the /metrics request.
func (r *Registry) NewGaugeFunc(name, help string, fn func() float64) {
	f := r.add(name, help, kindGauge, "")
	f.fn = fn
}

// CounterVec is a counter family with one label (for instance "device").
type CounterVec struct{ f *family }

// NewCounterVec registers a counter family with one label.
func (r *Registry) NewCounterVec(name, help, label string) *CounterVec {
	return &CounterVec{r.add(name, help, kindCounter, label)}
}

// With returns the counter for a label value, creating it at 0.
func (v *CounterVec) With(value string) *Counter {
	return v.f.get(value, func() series { return new(Counter) }).(*Counter)
}

// Delete drops the series of a label value.
func (v *CounterVec) Delete(value string) { v.f.delete(value) }

// GaugeVec is a gauge family with one label.
type GaugeVec struct{ f *family }

// NewGaugeVec registers a gauge family with one label.
func (r *Registry) NewGaugeVec(name, help, label string) *GaugeVec {
	return &GaugeVec{r.add(name, help, kindGauge, label)}
}

// With returns the gauge for a label value, creating it at 0.
func (v *GaugeVec) With(value string) *Gauge {
	return v.f.get(value, func() series { return new(Gauge) }).(*Gauge)
}

// Delete drops the series of a label value.
func (v *GaugeVec) Delete(value string) { v.f.delete(value) }

// Histogram counts observations into fixed cumulative buckets.
type Histogram struct {
	upper  []float64
	counts []atomic.Uint64 // one per bucket, plus +Inf
	sum    Gauge
	count  atomic.Uint64
}

// DefaultLatencyBuckets suit fsync and store round trips, in seconds: 0.1 ms to 10 s.
var DefaultLatencyBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

// NewHistogram registers a histogram with the given bucket upper bounds (ascending).
func (r *Registry) NewHistogram(name, help string, buckets []float64) *Histogram {
	if !slices.IsSorted(buckets) || len(buckets) == 0 {
		panic("metrics: histogram buckets must be non-empty and ascending")
	}
	f := r.add(name, help, kindHistogram, "")
	return f.get("", func() series {
		return &Histogram{upper: slices.Clone(buckets), counts: make([]atomic.Uint64, len(buckets)+1)}
	}).(*Histogram)
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.upper, v) // first bucket with upper >= v
	h.counts[i].Add(1)
	h.sum.Add(v)
	h.count.Add(1)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.count.Load() }

func (h *Histogram) write(w *strings.Builder, name, _ string) {
	var cum uint64
	for i, ub := range h.upper {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%s\"} %d\n", name, formatFloat(ub), cum)
	}
	cum += h.counts[len(h.upper)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", name, cum)
	fmt.Fprintf(w, "%s_sum %s\n", name, formatFloat(h.sum.Value()))
	// _count equals the +Inf bucket even while observations race the scrape.
	fmt.Fprintf(w, "%s_count %d\n", name, cum)
}

// OnScrape registers fn to run before each exposition, to refresh gauges from component
// statistics in one place. fn must be cheap and must not block.
func (r *Registry) OnScrape(fn func()) {
	r.mu.Lock()
	r.onScrape = append(r.onScrape, fn)
	r.mu.Unlock()
}

// WriteTo writes every family in registration order, series sorted by label value.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	hooks := slices.Clone(r.onScrape)
	r.mu.Unlock()
	for _, fn := range hooks {
		fn()
	}
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
		if f.fn != nil {
			fmt.Fprintf(&b, "%s %s\n", f.name, formatFloat(f.fn()))
			continue
		}
		f.mu.Lock()
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			labels := ""
			if f.label != "" {
				labels = "{" + f.label + "=\"" + escapeLabel(k) + "\"}"
			}
			f.series[k].write(&b, f.name, labels)
		}
		f.mu.Unlock()
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// Handler serves the registry at /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = r.WriteTo(w)
	})
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Exposition format: label values escape backslash, double quote and newline; HELP text
// escapes backslash and newline.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
