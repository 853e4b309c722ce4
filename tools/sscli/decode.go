package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Value formats `sscli get --decode` knows.
const (
	decodeRaw         = "raw"          // the bytes as stored (the default)
	decodeAuto        = "auto"         // by the key: faceagent/{gw}/devices/{id} is a device state, the rest raw
	decodeDeviceState = "device-state" // the agent's msgp DeviceState, as JSON
)

// decodeFormats lists the --decode values for usage messages.
const decodeFormats = decodeRaw + "|" + decodeAuto + "|" + decodeDeviceState

// isDeviceStateKey reports whether key has the shape of a terminal's state key,
// faceagent/{gw}/devices/{id} (docs/design.md "State store keys").
func isDeviceStateKey(key string) bool {
	parts := strings.Split(key, "/")
	return len(parts) == 4 && parts[0] == "faceagent" && parts[1] != "" && parts[2] == "devices" && parts[3] != ""
}

// formatFor resolves --decode for key: auto becomes device-state or raw by the key's shape.
func formatFor(format, key string) (string, error) {
	switch format {
	case decodeRaw, decodeDeviceState:
		return format, nil
	case decodeAuto:
		if isDeviceStateKey(key) {
			return decodeDeviceState, nil
		}
		return decodeRaw, nil
	}
	return "", usagef("--decode %q: want %s", format, decodeFormats)
}

// deviceStateView is wire.DeviceState as sscli prints it: the same field names as the
// msgp map keys, Unix-millisecond times as RFC 3339 UTC (null: never).
type deviceStateView struct {
	DeviceID      string  `json:"deviceId"`
	Online        bool    `json:"online"`
	LastHeartbeat *string `json:"lastHeartbeat"`
	LastAck       *string `json:"lastAck"`
	Firmware      string  `json:"firmware"`
	Persons       int     `json:"persons"`
	Paused        bool    `json:"paused"`
	QueueDepth    int     `json:"queueDepth"`
	InFlight      string  `json:"inFlight"`
	Sent          uint64  `json:"sent"`
	Succeeded     uint64  `json:"succeeded"`
	Failed        uint64  `json:"failed"`
	Retries       uint64  `json:"retries"`
	LastError     string  `json:"lastError"`
	UpdatedAt     *string `json:"updatedAt"`
}

func unixMilliText(ms int64) *string {
	if ms == 0 {
		return nil
	}
	s := time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	return &s
}

// decodeDeviceStateJSON decodes a msgp DeviceState and returns it as JSON followed by a
// newline: indented, or on one line when compact. Bytes that are not a DeviceState, or
// carry bytes after it, are an error; unknown map keys (a newer agent's) are skipped.
func decodeDeviceStateJSON(value []byte, compact bool) ([]byte, error) {
	var st wire.DeviceState
	rest, err := st.UnmarshalMsg(value)
	if err != nil {
		return nil, fmt.Errorf("not a device state (msgp): %w", err)
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("not a device state (msgp): %d bytes after the map", len(rest))
	}
	v := deviceStateView{
		DeviceID: st.DeviceID, Online: st.Online,
		LastHeartbeat: unixMilliText(st.LastHeartbeat), LastAck: unixMilliText(st.LastAck),
		Firmware: st.Firmware, Persons: st.Persons, Paused: st.Paused, QueueDepth: st.QueueDepth,
		InFlight: st.InFlight, Sent: st.Sent, Succeeded: st.Succeeded, Failed: st.Failed,
		Retries: st.Retries, LastError: st.LastError, UpdatedAt: unixMilliText(st.UpdatedAt),
	}
	var out []byte
	if compact {
		out, err = json.Marshal(v)
	} else {
		out, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
