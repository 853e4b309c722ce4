package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// maxLine bounds one line of a task file: a line is one task or one batch.
const maxLine = 4 << 20

// pending is one task as submitted: its raw JSON (sent as is) and what progress needs.
type pending struct {
	raw      json.RawMessage
	taskID   string
	deviceID string
}

// readTasks reads JSON Lines: each non-blank line is a task object or an array of them.
// Lines starting with '#' are comments. Only taskId and deviceId are read here; the agent
// validates the rest (and dead-letters what it refuses, which taskctl reports).
func readTasks(r io.Reader, name string) ([]pending, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []pending
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var elems []json.RawMessage
		if b[0] == '[' {
			if err := json.Unmarshal(b, &elems); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, line, err)
			}
		} else {
			elems = []json.RawMessage{append(json.RawMessage(nil), b...)}
		}
		for _, e := range elems {
			var t struct {
				TaskID   string `json:"taskId"`
				DeviceID string `json:"deviceId"`
			}
			if err := json.Unmarshal(e, &t); err != nil {
				return nil, fmt.Errorf("%s:%d: not a task object: %v", name, line, err)
			}
			if t.TaskID == "" {
				return nil, fmt.Errorf("%s:%d: task without taskId (results could not be matched)", name, line)
			}
			if prev, dup := seen[t.TaskID]; dup {
				return nil, fmt.Errorf("%s:%d: taskId %q already on line %d", name, line, t.TaskID, prev)
			}
			seen[t.TaskID] = line
			out = append(out, pending{raw: e, taskID: t.TaskID, deviceID: t.DeviceID})
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line is longer than %d bytes", name, maxLine)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// deviceIDs names n generated terminals prefix01, prefix02, … (zero-padded to n's width).
func deviceIDs(prefix string, n int) []string {
	width := len(strconv.Itoa(n))
	if width < 2 {
		width = 2
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%0*d", prefix, width, i+1)
	}
	return ids
}

// generateTasks makes n tasks spread round-robin over the devices: mostly AddPerson, and
// every seventh a DeletePerson of a person added earlier on that device, so a run exercises
// both ops. Task ids start with run so that results of an earlier run are not counted.
func generateTasks(n int, devices []string, run string) []pending {
	out := make([]pending, 0, n)
	for i := range n {
		dev := devices[i%len(devices)]
		person := strconv.Itoa(1000 + i/len(devices))
		t := wire.Task{
			TaskID:   fmt.Sprintf("%s-%d", run, i+1),
			DeviceID: dev,
			Op:       face.AddPerson,
			Person: face.Person{
				ID:        person,
				Name:      "Person " + person,
				ValidFrom: "2026-01-01T00:00:00Z",
				ValidTo:   "2030-12-31T23:59:59Z",
			},
		}
		if i%7 == 6 && i >= len(devices) {
			t.Op = face.DeletePerson
			t.Person = face.Person{ID: strconv.Itoa(1000 + i/len(devices) - 1)}
		}
		raw, _ := json.Marshal(t)
		out = append(out, pending{raw: raw, taskID: t.TaskID, deviceID: dev})
	}
	return out
}

// batches groups tasks into messages of at most size tasks: a lone task is sent as an
// object, more as a JSON array.
func batches(tasks []pending, size int) [][]byte {
	if size < 1 {
		size = 1
	}
	var out [][]byte
	for start := 0; start < len(tasks); start += size {
		group := tasks[start:min(start+size, len(tasks))]
		if len(group) == 1 {
			out = append(out, group[0].raw)
			continue
		}
		var b bytes.Buffer
		b.WriteByte('[')
		for i, t := range group {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(t.raw)
		}
		b.WriteByte(']')
		out = append(out, b.Bytes())
	}
	return out
}
