package e2e

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// syncConfig is the agent configuration the whitelist sync tests share: retries after
// 300 ms, terminals offline after 3 s without a heartbeat, journal syncs in batches and
// short reconciliation backoffs, so that a repair and its failures fit a test's time.
type syncConfig struct {
	gateway, dataDir string
	listen           string   // the embedded broker's address; "127.0.0.1:0" when empty
	metrics          string   // [metrics] listen; none when empty
	backoffMax       string   // [whitelist] backoff_max; "1s" when empty
	whitelist        []string // more [whitelist] lines, e.g. "list_limit = 7"
	intake           []string // [intake] lines
	devices          []string // [[devices]] ids (MQTT terminals)
}

func (c syncConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\ngateway_id = %q\ndata_dir = %q\n[broker]\nlisten = %q\n", c.gateway, c.dataDir, cmp.Or(c.listen, "127.0.0.1:0"))
	if c.metrics != "" {
		fmt.Fprintf(&b, "[metrics]\nlisten = %q\n", c.metrics)
	}
	b.WriteString("[dispatch]\nretry_interval = \"300ms\"\nheartbeat_timeout = \"3s\"\n[journal]\nsync = \"batch\"\n")
	if len(c.intake) > 0 {
		b.WriteString("[intake]\n" + strings.Join(c.intake, "\n") + "\n")
	}
	fmt.Fprintf(&b, "[whitelist]\nbackoff_base = \"200ms\"\nbackoff_max = %q\n", cmp.Or(c.backoffMax, "1s"))
	for _, l := range c.whitelist {
		b.WriteString(l + "\n")
	}
	for _, id := range c.devices {
		fmt.Fprintf(&b, "[[devices]]\nid = %q\n", id)
	}
	return b.String()
}

// deviceSections is the [[devices]] sections of ids, on MQTT or each on a serial line of
// its own (a pseudo-terminal pair closed when t ends; the test is skipped without ptys),
// and the simulator's ends of those lines.
func deviceSections(t testing.TB, ids []string, overSerial bool) (string, []sim.SerialPort) {
	t.Helper()
	var src string
	var ports []sim.SerialPort
	for _, id := range ids {
		if !overSerial {
			src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
			continue
		}
		p, err := serial.OpenPTY()
		if err != nil {
			t.Skipf("no pseudo-terminals here: %v", err)
		}
		ports = append(ports, sim.SerialPort{DeviceID: id, Port: p.Master})
		t.Cleanup(func() { p.Close() })
		src += fmt.Sprintf("[[devices]]\nid = %q\ntransport = \"serial\"\nport = %q\n", id, p.Path)
	}
	return src, ports
}
