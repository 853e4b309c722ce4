package face

import (
	"fmt"
	"testing"
)

var benchCommand = Command{
	MessageID: "EditPerson-951-1494527067538440192",
	Op:        AddPerson,
	Person:    Person{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z"},
}

func BenchmarkCommandJSON(b *testing.B) {
	buf := make([]byte, 0, 512)
	enc, _ := benchCommand.AppendJSON(nil)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := benchCommand.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseCommandJSON(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCommandMsg(b *testing.B) {
	buf := make([]byte, 0, 512)
	enc, _ := benchCommand.AppendMsg(nil)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := benchCommand.AppendMsg(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseCommandMsg(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTerminalJSON: what the agent does once per task on MQTT — encode a command,
// parse the terminal's ack — and once per heartbeat, by the hand-written codec and by the
// encoding/json reference (jsonplain_test.go) in the same run.
func BenchmarkTerminalJSON(b *testing.B) {
	ack, _ := (&Ack{MessageID: benchCommand.MessageID, Code: 0, Message: ""}).AppendJSON(nil)
	hb, _ := (&Heartbeat{DeviceID: "2042253", Time: "2026-11-22T10:00:00Z", Firmware: "v3.2.1", Persons: 123}).AppendJSON(nil)
	cmd, _ := benchCommand.AppendJSON(nil)
	buf := make([]byte, 0, 512)
	run := func(name string, size int, f func() error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("encode-command/plain", len(cmd), func() error { _, err := benchCommand.AppendJSON(buf[:0]); return err })
	run("encode-command/encoding-json", len(cmd), func() error { _, err := refAppendJSON(buf[:0], &benchCommand); return err })
	run("parse-ack/plain", len(ack), func() error { _, err := ParseAckJSON(ack); return err })
	run("parse-ack/encoding-json", len(ack), func() error { _, err := refParseAckJSON(ack); return err })
	run("parse-heartbeat/plain", len(hb), func() error { _, err := ParseHeartbeatJSON(hb); return err })
	run("parse-heartbeat/encoding-json", len(hb), func() error { _, err := refParseHeartbeatJSON(hb); return err })
	run("parse-command/plain", len(cmd), func() error { _, err := ParseCommandJSON(cmd); return err })
	run("parse-command/encoding-json", len(cmd), func() error { _, err := refParseCommandJSON(cmd); return err })
}

// BenchmarkFaces: a PutFace carrying a 4 KiB chunk (serial's chunk size) and an AddPersons
// of 30 persons, each with a rev and a face, encoded and decoded in both codecs.
func BenchmarkFaces(b *testing.B) {
	data := testFace()[:4096]
	put := Command{MessageID: "PutFace-2042253-1494527067538440192", Op: PutFace,
		Face: FaceChunk{SHA256: testFaceSHA, Size: 4105, Offset: 0, Data: data}}
	batch := Command{MessageID: "AddPersons-2042253-1494527067538440192", Op: AddPersons}
	for i := range 30 {
		p := Person{ID: fmt.Sprint(1000 + i), Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z",
			Face: FaceRef{SHA256: testFaceSHA, Size: 4105, Kind: FaceTemplate}}
		p.Rev = PersonRecordRev(&p).String()
		batch.Persons = append(batch.Persons, p)
	}
	buf := make([]byte, 0, 16<<10)
	for _, c := range []struct {
		name string
		cmd  *Command
	}{{"putface-4KiB", &put}, {"addpersons-30", &batch}} {
		j, _ := c.cmd.AppendJSON(nil)
		m, _ := c.cmd.AppendMsg(nil)
		for _, r := range []struct {
			name string
			size int
			f    func() error
		}{
			{"json-encode", len(j), func() error { _, err := c.cmd.AppendJSON(buf[:0]); return err }},
			{"json-decode", len(j), func() error { _, err := ParseCommandJSON(j); return err }},
			{"msgp-encode", len(m), func() error { _, err := c.cmd.AppendMsg(buf[:0]); return err }},
			{"msgp-decode", len(m), func() error { _, err := ParseCommandMsg(m); return err }},
		} {
			b.Run(c.name+"/"+r.name, func(b *testing.B) {
				b.SetBytes(int64(r.size))
				b.ReportAllocs()
				for b.Loop() {
					if err := r.f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	results := Ack{MessageID: batch.MessageID}
	for _, p := range batch.Persons {
		results.Results = append(results.Results, Result{ID: p.ID})
	}
	ackJ, _ := results.AppendJSON(nil)
	ackM, _ := results.AppendMsg(nil)
	b.Run("addpersons-30-ack/json-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseAckJSON(ackJ); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("addpersons-30-ack/msgp-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseAckMsg(ackM); err != nil {
				b.Fatal(err)
			}
		}
	})
}
