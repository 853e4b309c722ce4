package metrics

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	up := r.NewGauge("faceagent_upstream_connected", "1 while the upstream broker is connected.")
	tasks := r.NewCounter("faceagent_tasks_total", "Tasks accepted.")
	acks := r.NewCounterVec("faceagent_acks_total", "Acks from terminals.", "device")
	depth := r.NewGaugeVec("faceagent_queue_depth", "Queued commands.\nPer device.", "device")
	h := r.NewHistogram("faceagent_fsync_seconds", "Journal fsync latency.", []float64{0.001, 0.01})
	r.NewGaugeFunc("faceagent_devices", "Configured devices.", func() float64 { return 2 })
	scraped := 0
	r.OnScrape(func() { scraped++ })

	up.Set(1)
	tasks.Add(41)
	tasks.Inc()
	acks.With("b").Inc()
	acks.With(`a"\` + "\n").Add(3)
	depth.With("a").Set(5)
	depth.With("a").Add(-2)
	depth.With("gone").Set(1)
	depth.Delete("gone")
	for _, v := range []float64{0.0005, 0.001, 0.005, 2} {
		h.Observe(v)
	}

	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	const want = `# HELP faceagent_upstream_connected 1 while the upstream broker is connected.
# TYPE faceagent_upstream_connected gauge
faceagent_upstream_connected 1
# HELP faceagent_tasks_total Tasks accepted.
# TYPE faceagent_tasks_total counter
faceagent_tasks_total 42
# HELP faceagent_acks_total Acks from terminals.
# TYPE faceagent_acks_total counter
faceagent_acks_total{device="a\"\\\n"} 3
faceagent_acks_total{device="b"} 1
# HELP faceagent_queue_depth Queued commands.\nPer device.
# TYPE faceagent_queue_depth gauge
faceagent_queue_depth{device="a"} 3
# HELP faceagent_fsync_seconds Journal fsync latency.
# TYPE faceagent_fsync_seconds histogram
faceagent_fsync_seconds_bucket{le="0.001"} 2
faceagent_fsync_seconds_bucket{le="0.01"} 3
faceagent_fsync_seconds_bucket{le="+Inf"} 4
faceagent_fsync_seconds_sum 2.0065
faceagent_fsync_seconds_count 4
# HELP faceagent_devices Configured devices.
# TYPE faceagent_devices gauge
faceagent_devices 2
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if scraped != 1 {
		t.Errorf("OnScrape ran %d times", scraped)
	}
	if h.Count() != 4 || tasks.Value() != 42 || depth.With("a").Value() != 3 {
		t.Error("values")
	}
}

func TestHandler(t *testing.T) {
	r := NewRegistry()
	r.NewCounter("x_total", "x").Inc()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	if !strings.Contains(string(body), "x_total 1\n") {
		t.Errorf("body %q", body)
	}
	resp, err = http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

func TestInvalidNamesPanic(t *testing.T) {
	r := NewRegistry()
	r.NewCounter("ok_total", "")
	for name, fn := range map[string]func(){
		"duplicate":     func() { r.NewCounter("ok_total", "") },
		"bad name":      func() { r.NewGauge("1bad", "") },
		"bad label":     func() { r.NewGaugeVec("g", "", "a-b") },
		"reserved":      func() { r.NewGaugeVec("g2", "", "__x") },
		"bad buckets":   func() { r.NewHistogram("h", "", []float64{2, 1}) },
		"empty buckets": func() { r.NewHistogram("h2", "", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

func TestConcurrentUpdates(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounterVec("c_total", "", "device")
	g := r.NewGauge("g", "")
	h := r.NewHistogram("h", "", DefaultLatencyBuckets)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.With(string(rune('a' + i))).Inc()
				g.Add(1)
				h.Observe(0.003)
				_, _ = r.WriteTo(io.Discard)
			}
		}()
	}
	wg.Wait()
	if g.Value() != 4000 || h.Count() != 4000 || c.With("a").Value() != 1000 {
		t.Fatalf("lost updates: %v %v %v", g.Value(), h.Count(), c.With("a").Value())
	}
	if formatFloat(math.Inf(1)) != "+Inf" || formatFloat(math.NaN()) != "NaN" {
		t.Error("special floats")
	}
}

func BenchmarkCounterVecInc(b *testing.B) {
	c := NewRegistry().NewCounterVec("c_total", "", "device").With("2042253")
	b.ReportAllocs()
	for b.Loop() {
		c.Inc()
	}
}
