package attack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// maxMessageSize is intake.max_message_size in every setup's config (64 KiB), well under
// broker.max_packet_size (1 MiB), so that an oversized task message reaches the intake.
const maxMessageSize = 64 << 10

// badTaskCases is how many bad task messages badTasks sends a round, badTaskRounds how
// many rounds.
const badTaskCases = 13

var badTaskRounds = scale(1, 20)

// badTasks publishes task messages the intake must refuse; each is acknowledged (it is
// dead-lettered, not lost) and each deadletter names the precise reason.
func badTasks(t *testing.T, s *system) {
	user := ""
	if s.setup.users {
		user = "backoffice"
	}
	mc := s.mustConnect(t, clientOpts{id: "bad-tasks", user: user})
	task := func(fields string) string {
		return `{"taskId":"bad","deviceId":"t1","op":"AddPerson","person":{"id":"1"}` + fields + `}`
	}
	big := `{"taskId":"big","deviceId":"t1","op":"AddPerson","person":{"id":"1","name":"` + strings.Repeat("n", maxMessageSize) + `"}}`
	batch := "[" + strings.Repeat(`{},`, 1000) + `{}]`
	cases := []struct{ payload, reason string }{
		{"not json at all", `malformed JSON: invalid character 'o' in literal null (expecting 'u') at byte 2`},
		{`[{"taskId":"t"`, "malformed JSON: unexpected end of JSON input at byte 14"},
		{`42`, "not a task: want a JSON object or an array of objects"},
		{``, "malformed JSON: unexpected end of JSON input at byte 0"},
		{`{"taskId":"u","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`, `unknown device "nope"`},
		{`{"taskId":"u","deviceId":"t1","op":"EditPerson","person":{"id":"1"}}`, `invalid task: op: unknown op "EditPerson" (want "AddPerson", "DeletePerson" or "SetWhitelist")`},
		{`{"taskId":"t","deviceId":"t1","op":"AddPerson","person":"951"}`, "invalid task: person: want an object, got JSON string"},
		{`{"deviceId":"t1","op":"AddPerson","person":{"id":"1"}}`, "invalid task: taskId: missing"},
		{`{"taskId":"t\n1","deviceId":"t1","op":"DeletePerson","person":{"id":"1"}}`, `invalid task: taskId: "t\n1" contains a control character`},
		{`{"taskId":"t","deviceId":"t1","op":"DeletePerson","person":{"id":"` + strings.Repeat("9", 65) + `"}}`, "invalid task: person.id: longer than 64 bytes"},
		{task(`,"extra":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000)), ""}, // any reason: deep nesting must not crash
		{big, fmt.Sprintf("message too large: %d bytes (max_message_size %d)", len(big), maxMessageSize)},
		{batch, "batch too large: 1001 tasks (max_batch 1000)"},
	}
	if len(cases) != badTaskCases {
		t.Fatalf("%d cases, badTaskCases says %d", len(cases), badTaskCases)
	}
	for range badTaskRounds {
		from := s.tr.bo.deadletterCount()
		for _, c := range cases {
			if code, err := mc.publish("faceagent/"+gateway+"/tasks", []byte(c.payload), nil); err != nil || code != 0 {
				t.Fatalf("%.40q: PUBACK 0x%02x %v, want 0 (acknowledged, dead-lettered)", c.payload, code, err)
			}
		}
		got, err := s.tr.bo.waitDeadletters(from, len(cases), resultDeadline)
		if err != nil {
			t.Fatalf("%d of %d deadletters arrived", len(got), len(cases))
		}
		reasons := map[string]bool{}
		for _, d := range got {
			reasons[d.Reason] = true
		}
		for _, c := range cases {
			if c.reason != "" && !reasons[c.reason] {
				t.Errorf("no deadletter with reason %q among %d", c.reason, len(got))
			}
		}
	}
}

// badTerminalInput publishes on the terminals' ack and heartbeat topics what no terminal
// sends: garbage, acks for messages never sent, huge and deeply nested JSON, wrong types.
// The agent drops them; the real terminals' commands and acks go on.
func badTerminalInput(t *testing.T, s *system) {
	mc := s.mustConnect(t, clientOpts{id: "bad-terminal", user: attacker(s)})
	inputs := []string{
		"", "garbage", "\x00\x01\x02", "{}", "[]", "null", `"x"`, `{"messageId":123}`,
		`{"messageId":"never-sent","code":0}`, `{"messageId":"never-sent","code":"zero"}`,
		`{"messageId":"","code":0}`, `{"deviceId":"t1","time":"not a time","persons":-1}`,
		`{"deviceId":"t2","time":"2026-01-01T00:00:00Z"}`, // t2's heartbeat on t1's topic
		strings.Repeat("[", 50000), `{"messageId":"` + strings.Repeat("m", 60000) + `"}`,
	}
	for i := range scale(4, 100) {
		for _, in := range inputs {
			id := terminals[i%len(terminals)]
			for _, topic := range []string{"dev/face/" + id + "/Ack", "dev/face/" + id + "/heartbeat"} {
				if code, err := mc.publish(topic, []byte(in), nil); err != nil || code >= 0x80 {
					t.Fatalf("%s %.40q: PUBACK 0x%02x %v", topic, in, code, err)
				}
			}
		}
	}
}

// diskFullUnderTaskJournal fills the tmpfs under data_dir while the back office submits:
// tasks are refused (PUBACK 0x83, Implementation specific error) and /healthz answers
// 503; once the space is back the agent is restarted, as systemd's watchdog does on a
// failed health check, and every task acknowledged before, during or after gets its
// result (runAttack checks that).
func diskFullUnderTaskJournal(t *testing.T, s *system) {
	before := s.tr.bo.refusals(packets.ErrImplementationSpecificError.Code)
	filler := filepath.Join(s.dataView, "filler")
	fill(t, filler)
	defer os.Remove(filler)
	deadline := time.Now().Add(resultDeadline)
	for s.tr.bo.refusals(packets.ErrImplementationSpecificError.Code) == before {
		if time.Now().After(deadline) {
			t.Fatalf("no task refused with 0x83 within %v of the disk filling up", resultDeadline)
		}
		s.tr.bo.wait(100 * time.Millisecond)
	}
	s.waitHealthz(503, resultDeadline)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.restart()
	s.waitHealthz(200, resultDeadline)
}

// fill writes path until the file system under it is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
	for _, n := range []int{64 << 10, 4 << 10, 512, 1} { // the last bytes too
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}
