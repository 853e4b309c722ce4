package face

import "testing"

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
