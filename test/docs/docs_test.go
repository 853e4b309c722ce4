package docs

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/ui"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// minExamples is how many marked examples each document holds at least: removing a marker
// (or breaking one so it is no longer found) must be deliberate.
var minExamples = map[string]int{
	"integration.md": 12,
	"operations.md":  1,
	"protocol.md":    12,
}

// unknownDevice is the documents' terminal that no gateway knows.
const unknownDevice = "9999"

var marker = regexp.MustCompile(`^<!-- example: ([a-z-]+) -->\s*$`)

// example is one marked block of a document.
type example struct {
	file string
	line int // the marker's
	kind string
	body string
}

func (e example) String() string { return fmt.Sprintf("%s:%d (%s)", e.file, e.line, e.kind) }

// examples returns the marked blocks of a document, in order.
func examples(t *testing.T, path string) []example {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []example
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.Contains(lines[i], "<!-- example") {
				t.Errorf("%s:%d: a malformed example marker: %q", filepath.Base(path), i+1, lines[i])
			}
			continue
		}
		e := example{file: filepath.Base(path), line: i + 1, kind: m[1]}
		var body []string
		switch {
		case e.kind == "rev-table":
			for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
				body = append(body, lines[j])
			}
		case i+1 < len(lines) && strings.HasPrefix(lines[i+1], "```"):
			j := i + 2
			for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				body = append(body, lines[j])
			}
			if j == len(lines) {
				t.Errorf("%v: the fenced block is not closed", e)
			}
			i = j
		}
		if len(body) == 0 {
			t.Errorf("%v: the marker is not followed by its block", e)
			continue
		}
		e.body = strings.Join(body, "\n")
		out = append(out, e)
	}
	return out
}

// TestDocumentExamples checks every marked example of docs/*.md (see the package doc).
func TestDocumentExamples(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no documents: %v", err)
	}
	for _, path := range paths {
		exs := examples(t, path)
		name := filepath.Base(path)
		if len(exs) < minExamples[name] {
			t.Errorf("%s: %d marked examples, want at least %d", name, len(exs), minExamples[name])
		}
		// A document's tasks, by taskId, for its results' messageIds.
		tasks := map[string]string{}
		for _, e := range exs {
			if e.kind == "task" {
				for _, task := range checkTasks(t, e) {
					tasks[task.TaskID] = task.MessageID()
				}
			}
		}
		for _, e := range exs {
			check, ok := checks[e.kind]
			switch {
			case e.kind == "task":
			case !ok:
				t.Errorf("%v: unknown example kind", e)
			default:
				check(t, e, tasks)
			}
		}
	}
}

var checks = map[string]func(t *testing.T, e example, tasks map[string]string){
	"result":         checkResult,
	"deadletter":     checkDeadLetter,
	"syncreport":     checkSyncReports,
	"control":        strictJSON[remote.ControlCommand],
	"page-state":     checkPageState,
	"config-status":  strictJSON[remote.Status],
	"control-status": strictJSON[remote.Status],
	"command":        checkCommand,
	"ack": func(t *testing.T, e example, _ map[string]string) {
		if _, err := face.ParseAckJSON([]byte(e.body)); err != nil {
			t.Errorf("%v: %v", e, err)
		}
	},
	"heartbeat": func(t *testing.T, e example, _ map[string]string) {
		if _, err := face.ParseHeartbeatJSON([]byte(e.body)); err != nil {
			t.Errorf("%v: %v", e, err)
		}
	},
	"rev-table": checkRevTable,
	"digest":    checkDigest,
	"frame":     checkFrame,
	"msgp":      checkMsgp,
}

func limits() wire.Limits {
	return wire.Limits{MaxWhitelist: wire.DefaultMaxWhitelist, KnownDevice: func(id string) bool { return id != unknownDevice }}
}

func checkTasks(t *testing.T, e example) []wire.Task {
	b := wire.Parse([]byte(e.body), limits())
	for _, r := range b.Rejects {
		t.Errorf("%v: refused: %s", e, r.Reason)
	}
	if len(b.Tasks) == 0 {
		t.Errorf("%v: no task", e)
	}
	return b.Tasks
}

func checkResult(t *testing.T, e example, tasks map[string]string) {
	r, err := wire.ParseResult([]byte(e.body))
	if err != nil {
		t.Errorf("%v: %v", e, err)
		return
	}
	if id, ok := tasks[r.TaskID]; ok && id != r.MessageID {
		t.Errorf("%v: messageId %q, but the document's task %q has messageId %q", e, r.MessageID, r.TaskID, id)
	}
}

var arrayIndex = regexp.MustCompile(`^task \d+: $`)

func checkDeadLetter(t *testing.T, e example, _ map[string]string) {
	dl, err := wire.ParseDeadLetter([]byte(e.body))
	if err != nil {
		t.Errorf("%v: %v", e, err)
		return
	}
	payload := []byte(dl.Payload)
	var s string
	if json.Unmarshal(payload, &s) == nil {
		payload = []byte(s) // the bytes that were not JSON
	}
	b := wire.Parse(payload, limits())
	if len(b.Rejects) != 1 {
		t.Errorf("%v: its payload gives %d rejects, want 1", e, len(b.Rejects))
		return
	}
	got := b.Rejects[0].Reason
	prefix, ok := strings.CutSuffix(dl.Reason, got)
	if !ok || (prefix != "" && !arrayIndex.MatchString(prefix)) {
		t.Errorf("%v: reason %q, but the gateway refuses its payload with %q", e, dl.Reason, got)
	}
}

func checkSyncReports(t *testing.T, e example, _ map[string]string) {
	for i, line := range strings.Split(e.body, "\n") {
		if _, err := wire.ParseSyncReport([]byte(line)); err != nil {
			t.Errorf("%v, line %d: %v", e, i+1, err)
		}
	}
}

// strictJSON decodes the example into a T and refuses fields T does not have.
func strictJSON[T any](t *testing.T, e example, _ map[string]string) {
	d := json.NewDecoder(strings.NewReader(e.body))
	d.DisallowUnknownFields()
	var v T
	if err := d.Decode(&v); err != nil {
		t.Errorf("%v: %v", e, err)
	}
}

// checkPageState: the operator page's state (GET /api/state) decodes into agent/ui's
// State with no unknown field, and names every field the page always sends (those without
// omitempty): a field renamed, added or dropped in the type fails until the example
// follows.
func checkPageState(t *testing.T, e example, _ map[string]string) {
	d := json.NewDecoder(strings.NewReader(e.body))
	d.DisallowUnknownFields()
	var st ui.State
	if err := d.Decode(&st); err != nil {
		t.Errorf("%v: %v", e, err)
		return
	}
	var shown, sent any
	if err := json.Unmarshal([]byte(e.body), &shown); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(st)
	if err := json.Unmarshal(again, &sent); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	jsonPaths(shown, "", have)
	want := map[string]bool{}
	jsonPaths(sent, "", want)
	for p := range want {
		if !have[p] {
			t.Errorf("%v: the example lacks %s, which the page's state always has", e, p)
		}
	}
}

// jsonPaths adds the key paths of v to paths: "health.journals[].name"; an array's
// elements share one path.
func jsonPaths(v any, prefix string, paths map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			paths[p] = true
			jsonPaths(x, p, paths)
		}
	case []any:
		for _, x := range v {
			jsonPaths(x, prefix+"[]", paths)
		}
	}
}

func checkCommand(t *testing.T, e example, _ map[string]string) {
	c, err := face.ParseCommandJSON([]byte(e.body))
	if err != nil {
		t.Errorf("%v: %v", e, err)
		return
	}
	if p := c.Person; p.Rev != "" {
		if want := face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String(); p.Rev != want {
			t.Errorf("%v: rev %s, RecordRev of the person is %s", e, p.Rev, want)
		}
	}
}

// checkRevTable checks a table | id | name | validFrom | validTo | face | rev |, where the
// rev column starts with the rev in backticks.
func checkRevTable(t *testing.T, e example, _ map[string]string) {
	rows := 0
	for _, line := range strings.Split(e.body, "\n")[2:] { // past the heading and its rule
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 6 {
			t.Errorf("%v: row %q has %d cells, want 6", e, line, len(cells))
			continue
		}
		f := make([]string, 6)
		for i, c := range cells {
			c = strings.TrimSpace(c)
			if c == "(none)" {
				c = ""
			}
			if i < 5 {
				c = strings.Trim(c, "`")
			}
			f[i] = c
		}
		rev := regexp.MustCompile("^`([0-9a-f]{16})`").FindStringSubmatch(f[5])
		if rev == nil {
			t.Errorf("%v: row %q: no rev in backticks first in its last cell", e, line)
			continue
		}
		if got := face.RecordRev(f[0], f[1], f[2], f[3], f[4]).String(); got != rev[1] {
			t.Errorf("%v: person %q: rev %s written, RecordRev gives %s", e, f[0], rev[1], got)
		}
		rows++
	}
	if rows == 0 {
		t.Errorf("%v: no rows", e)
	}
}

var (
	memberLine = regexp.MustCompile(`^member\((\S+)\) = .*\("(\S+)\\n([0-9a-f]{16})"\).* = ([0-9a-f]{16})$`)
	digestLine = regexp.MustCompile(`^digest \{([^}]*)\} .*= ([0-9a-f]{16})$`)
)

func checkDigest(t *testing.T, e example, _ map[string]string) {
	members := map[string]uint64{}
	digests := 0
	for _, line := range strings.Split(e.body, "\n") {
		line = strings.TrimSpace(line)
		if m := memberLine.FindStringSubmatch(line); m != nil {
			rev, err := face.ParseRev(m[3])
			if err != nil || m[1] != m[2] {
				t.Errorf("%v: %q: rev %v, ids %q and %q", e, line, err, m[1], m[2])
				continue
			}
			got := face.Member(m[2], rev)
			if want := m[4]; fmt.Sprintf("%016x", got) != want {
				t.Errorf("%v: member(%s) written %s, face.Member gives %016x", e, m[1], want, got)
			}
			members[m[1]] = got
			continue
		}
		m := digestLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%v: line %q is neither a member nor a digest", e, line)
			continue
		}
		var d face.Digest
		for _, id := range strings.Split(m[1], ",") {
			if id = strings.TrimSpace(id); id == "" {
				continue
			}
			mem, ok := members[id]
			if !ok {
				t.Errorf("%v: digest of %s, whose member is not given above", e, id)
			}
			d ^= face.Digest(mem)
		}
		if d.String() != m[2] {
			t.Errorf("%v: digest {%s} written %s, computed %s", e, m[1], m[2], d)
		}
		digests++
	}
	if len(members) == 0 || digests == 0 {
		t.Errorf("%v: %d members and %d digests found", e, len(members), digests)
	}
}

var hexByte = regexp.MustCompile(`^[0-9a-f]{2}$`)

// hexBytes reads a hex dump: on each line the leading two-digit hex tokens, up to the first
// other token (the annotation).
func hexBytes(t *testing.T, e example) []byte {
	var raw []byte
	for _, line := range strings.Split(e.body, "\n") {
		for _, tok := range strings.Fields(line) {
			if !hexByte.MatchString(tok) {
				break
			}
			b, _ := hex.DecodeString(tok)
			raw = append(raw, b...)
		}
	}
	if len(raw) == 0 {
		t.Errorf("%v: no hex bytes", e)
	}
	return raw
}

// checkMsgp: an annotated msgp dump of a command, as the gateway encodes it.
func checkMsgp(t *testing.T, e example, _ map[string]string) {
	raw := hexBytes(t, e)
	c, err := face.ParseCommandMsg(raw)
	if err != nil {
		t.Errorf("%v: %v", e, err)
		return
	}
	again, err := c.AppendMsg(nil)
	if err != nil || !bytes.Equal(again, raw) {
		t.Errorf("%v: the gateway encodes the command as\n% x\n(err %v), the document says\n% x", e, again, err, raw)
	}
}

func checkFrame(t *testing.T, e example, _ map[string]string) {
	raw := hexBytes(t, e)
	f, rest, err := serial.ReadFrame(raw, 0)
	if err != nil || len(rest) != 0 {
		t.Errorf("%v: ReadFrame: %v, %d bytes after the frame", e, err, len(rest))
		return
	}
	var m serial.Message
	switch f.Kind {
	case serial.KindCommand:
		c, perr := face.ParseCommandMsg(f.Payload)
		m, err = &c, perr
	case serial.KindAck:
		a, perr := face.ParseAckMsg(f.Payload)
		m, err = &a, perr
	case serial.KindHeartbeat:
		h, perr := face.ParseHeartbeatMsg(f.Payload)
		m, err = &h, perr
	}
	if err != nil {
		t.Errorf("%v: the payload is no valid message of kind %#x: %v", e, f.Kind, err)
		return
	}
	again, err := serial.AppendMessage(nil, f.Kind, m)
	if err != nil || !bytes.Equal(again, raw) {
		t.Errorf("%v: the gateway encodes the message as\n% x\n(err %v), the document says\n% x", e, again, err, raw)
	}
}
