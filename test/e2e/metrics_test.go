package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestMetricsScrapeMemoryAndPayloads scrapes a running agent with a terminal configured:
// the memory series and the outbox's payload file series are served.
func TestMetricsScrapeMemoryAndPayloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	cfg := parse(t, "[agent]\ngateway_id = \"mm\"\ndata_dir = \""+dir+"\"\n[broker]\nlisten = \"127.0.0.1:0\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"t1\"\n")
	_, a, stop := startAgentFull(t, cfg)
	defer stop()
	body := scrape(t, a)
	for _, want := range []string{
		"process_resident_memory_bytes ",
		`faceagent_go_memory_bytes{class="stacks"} `,
		"faceagent_outbox_payload_file_bytes ",
		"faceagent_outbox_payloads_on_heap 0\n",
		`faceagent_outbox_payload_errors_total{op="read"} 0`,
		`faceagent_outbox_payload_errors_total{op="repair"} 0`,
		"faceagent_outbox_payload_repairs_total 0\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
