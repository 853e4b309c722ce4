package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/boards"
)

// boardProfile is where `agent.board = "<name>"` finds its defaults: the boards package's
// profile, rendered as TOML in this package's schema. Parse decodes it before the file, so
// every key written in the file wins over the board's. A board sets:
//
//	[agent]   gomemlimit, data_dir
//	[journal] sync, batch_window
//	[broker]  the bounds a small board needs smaller (boards.BrokerBounds), when it sets them
//	          (the table does not switch the broker on)
//	[faces]   max_bytes, when it sets it
//	[intake]  max_whitelist, when it sets it
//
// and its serial ports fill in serial devices without a port (assignBoardPorts).
//
// An unknown name is an error wrapping boards.ErrUnknownBoard that lists the known ones.
func boardProfile(name string) ([]byte, error) {
	p, err := boards.Lookup(name)
	if err != nil {
		return nil, err
	}
	return profileTOML(p), nil
}

func profileTOML(p boards.Profile) []byte {
	b := fmt.Appendf(nil, "[agent]\ngomemlimit = %d\ndata_dir = %s\n[journal]\nsync = %s\n",
		p.GOMEMLIMIT, strconv.Quote(p.DataDir), strconv.Quote(string(p.JournalSync)))
	if p.JournalBatchWindow > 0 {
		b = fmt.Appendf(b, "batch_window = %s\n", strconv.Quote(time.Duration(p.JournalBatchWindow).String()))
	}
	if bb := p.Broker; bb != (boards.BrokerBounds{}) {
		b = append(b, "[broker]\n"...)
		for _, k := range []struct {
			key string
			v   int64
		}{{"max_clients", int64(bb.MaxClients)}, {"max_pending_write_bytes", bb.MaxPendingWriteBytes},
			{"max_session_bytes", bb.MaxSessionBytes}, {"max_queued_bytes", bb.MaxQueuedBytes},
			{"max_retained_bytes", bb.MaxRetainedBytes}, {"max_inbound_bytes", bb.MaxInboundBytes},
			{"store_max_bytes", bb.StoreMaxBytes}} {
			if k.v > 0 {
				b = fmt.Appendf(b, "%s = %d\n", k.key, k.v)
			}
		}
	}
	if p.FacesMaxBytes > 0 {
		b = fmt.Appendf(b, "[faces]\nmax_bytes = %d\n", p.FacesMaxBytes)
	}
	if p.IntakeMaxWhitelist > 0 {
		b = fmt.Appendf(b, "[intake]\nmax_whitelist = %d\n", p.IntakeMaxWhitelist)
	}
	return b
}

// boardSerialPorts is the default Options.BoardSerialPorts: the boards package's ports.
func boardSerialPorts(name string) ([]string, error) {
	p, err := boards.Lookup(name)
	if err != nil {
		return nil, err
	}
	return p.SerialPorts, nil
}

// assignBoardPorts gives each [[devices]] entry with transport = "serial" and no port the
// next of the board's default ports, in the order the entries appear. A port some entry
// names explicitly is skipped (explicit ports win, and two terminals cannot share a line).
// An entry left without a port is an error naming it and the board; without a board,
// validation reports the missing port as before.
func (d *decoder) assignBoardPorts(cfg *Config, board string, ports []string) {
	if board == "" {
		return
	}
	taken := map[string]bool{}
	for _, dev := range cfg.Devices {
		if dev.Transport == TransportSerial && dev.Port != "" {
			taken[dev.Port] = true
		}
	}
	var free []string
	for _, p := range ports {
		if !taken[p] {
			free = append(free, p)
			taken[p] = true
		}
	}
	for i := range cfg.Devices {
		dev := &cfg.Devices[i]
		if dev.Transport != TransportSerial || dev.Port != "" {
			continue
		}
		if len(free) == 0 {
			key := fmt.Sprintf("devices[%d].port", i)
			switch {
			case len(ports) == 0:
				d.errf(key, "device %q: board %q has no default serial ports; set port", dev.ID, board)
			default:
				d.errf(key, "device %q: board %q has %d default serial ports (%s), all taken by earlier devices or explicit ports; set port",
					dev.ID, board, len(ports), strings.Join(ports, ", "))
			}
			continue
		}
		dev.Port, free = free[0], free[1:]
	}
}
