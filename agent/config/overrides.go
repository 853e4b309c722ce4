package config

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// ApplyOverrides lays a remote override (the TOML value of the store key
// faceagent/{gw}/config) over base and returns the result, validated as a whole; base is
// not changed. An override may set any key of [dispatch] and, in [[devices]] entries
// naming an existing id, heartbeat, retry_interval, max_tries and heartbeat_timeout:
//
//	[dispatch]
//	retry_interval = "5s"
//
//	[[devices]]
//	id = "2042253"
//	heartbeat = false
//
// Anything else is refused with "override:LINE: key: what is wrong", and the running
// configuration stays as it is. An empty override means "no overrides": base itself.
func ApplyOverrides(base *Config, override []byte) (*Config, error) {
	const name = "override"
	if len(override) > MaxFileSize {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize), Err: ErrTooLarge}}
	}
	src := string(override)
	d := decoder{file: name, ix: indexLines(src)}
	var ov struct {
		Dispatch Dispatch `toml:"dispatch"`
		Devices  []struct {
			ID               string   `toml:"id"`
			Heartbeat        *bool    `toml:"heartbeat"`
			RetryInterval    Duration `toml:"retry_interval"`
			MaxTries         int      `toml:"max_tries"`
			HeartbeatTimeout Duration `toml:"heartbeat_timeout"`
		} `toml:"devices"`
	}
	ov.Dispatch = base.Dispatch // keys the override leaves out keep their values
	md, err := toml.Decode(src, &ov)
	if err != nil {
		return nil, Errors{d.decodeError(err, src)}
	}
	allowed := map[string]bool{"dispatch": true, "devices": true, "devices.id": true, "devices.heartbeat": true,
		"devices.retry_interval": true, "devices.max_tries": true, "devices.heartbeat_timeout": true}
	for _, k := range SchemaKeys() {
		if strings.HasPrefix(k, "dispatch.") {
			allowed[k] = true
		}
	}
	var errs Errors
	seen := map[string]int{}
	for _, k := range md.Keys() {
		plain := strings.Join(k, ".")
		n := seen[plain]
		seen[plain] = n + 1
		if !allowed[plain] {
			errs = append(errs, &Error{File: name, Line: d.ix.nth(plain, n), Key: plain,
				Msg: "cannot be overridden remotely (only [dispatch] and devices' heartbeat, retry_interval, max_tries, heartbeat_timeout)"})
		}
	}
	if len(errs) > 0 {
		return nil, errs.sorted()
	}

	out := *base
	out.Dispatch = ov.Dispatch
	out.Devices = append([]Device(nil), base.Devices...)
	for i, od := range ov.Devices {
		key := fmt.Sprintf("devices[%d]", i)
		dev := out.Device(od.ID)
		if dev == nil {
			d.errf(key+".id", "%q is not a configured device", od.ID)
			continue
		}
		if od.Heartbeat != nil {
			hb := *od.Heartbeat
			dev.Heartbeat = &hb
		}
		if d.ix.has(key + ".retry_interval") {
			dev.RetryInterval = od.RetryInterval
		}
		if d.ix.has(key + ".max_tries") {
			dev.MaxTries = od.MaxTries
		}
		if d.ix.has(key + ".heartbeat_timeout") {
			dev.HeartbeatTimeout = od.HeartbeatTimeout
		}
	}
	d.validateDispatch(out.Dispatch)
	d.validateDevices(&out)
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return &out, nil
}
