package metrics

import (
	"runtime"
	"strings"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"Name:\tfaceagent\nVmRSS:\t   12345 kB\nRssAnon:\t 1 kB\n", 12345 << 10},
		{"VmRSS: x kB\n", 0},
		{"VmRSS: -4 kB\n", 0},
		{"VmRSS: 4 MB\n", 0},
		{"", 0},
	} {
		if got := parseVmRSS(c.in); got != c.want {
			t.Errorf("parseVmRSS(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if runtime.GOOS == "linux" && residentBytes() <= 0 {
		t.Error("residentBytes() found no VmRSS for this process")
	}
}

func FuzzParseVmRSS(f *testing.F) {
	f.Add("VmRSS:\t   12345 kB\n")
	f.Fuzz(func(t *testing.T, s string) {
		if n := parseVmRSS(s); n < 0 {
			t.Fatalf("negative size %d", n)
		}
	})
}

func TestMemoryMetricsExported(t *testing.T) {
	r := NewRegistry()
	RegisterProcess(r)
	var exp strings.Builder
	if _, err := r.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"process_resident_memory_bytes ", `faceagent_go_memory_bytes{class="heap_objects"} `, `faceagent_go_memory_bytes{class="stacks"} `} {
		if !strings.Contains(exp.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, exp.String())
		}
	}
	if strings.Contains(exp.String(), `faceagent_go_memory_bytes{class="heap_objects"} 0`+"\n") {
		t.Error("heap_objects reads 0: the runtime metric name is wrong")
	}
}
