package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// maxWhitelistFile bounds the persons of one -set-whitelist file: well above any
// gateway's intake.max_whitelist (the gateway refuses a list over its own bound, and
// taskctl shows the deadletter), so that only a wrong file is refused here.
const maxWhitelistFile = 4 * wire.DefaultMaxWhitelist

// readWhitelist builds one SetWhitelist task for device from a JSON Lines file of persons
// (one person object per line, '#' comments and blank lines skipped). Each line is sent as
// written, compacted; only its "id" is read here, to refuse a missing or repeated id with
// its line numbers before anything is sent. The agent validates the rest.
func readWhitelist(r io.Reader, name, taskID, device string) (pending, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var msg bytes.Buffer
	msg.WriteString(`{"taskId":`)
	writeJSONString(&msg, taskID)
	msg.WriteString(`,"deviceId":`)
	writeJSONString(&msg, device)
	msg.WriteString(`,"op":"SetWhitelist","persons":[`)
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var p struct {
			ID string `json:"id"`
		}
		if b[0] != '{' || json.Unmarshal(b, &p) != nil {
			return pending{}, fmt.Errorf("%s:%d: not a person object", name, line)
		}
		if p.ID == "" {
			return pending{}, fmt.Errorf("%s:%d: person without id", name, line)
		}
		if prev, dup := seen[p.ID]; dup {
			return pending{}, fmt.Errorf("%s:%d: person id %q already on line %d", name, line, p.ID, prev)
		}
		if len(seen) == maxWhitelistFile {
			return pending{}, fmt.Errorf("%s:%d: more than %d persons", name, line, maxWhitelistFile)
		}
		seen[p.ID] = line
		if len(seen) > 1 {
			msg.WriteByte(',')
		}
		if err := json.Compact(&msg, b); err != nil {
			return pending{}, fmt.Errorf("%s:%d: %v", name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return pending{}, fmt.Errorf("%s: a line is longer than %d bytes", name, maxLine)
		}
		return pending{}, fmt.Errorf("%s: %w", name, err)
	}
	msg.WriteString("]}")
	return pending{raw: msg.Bytes(), taskID: taskID, deviceID: device}, nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}
