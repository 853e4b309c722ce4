package face

import (
	"encoding/hex"
	"testing"
)

type encoder interface {
	AppendMsg([]byte) ([]byte, error)
	AppendJSON([]byte) ([]byte, error)
}

// TestV1BytesUnchanged pins the bytes of protocol v1 messages in both encodings: v1
// terminals read them, and the outbox's journals on disk hold commands in msgp, so fields
// added by later protocol versions must leave a v1 message's bytes exactly as they were.
func TestV1BytesUnchanged(t *testing.T) {
	for _, g := range []struct {
		m        encoder
		msgp     string // hex
		jsonText string
	}{
		{&Command{MessageID: "m-1", Op: AddPerson, Person: Person{ID: "951", Name: "Li Lei", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z"}},
			"83a96d6573736167654964a36d2d31a26f70a9416464506572736f6ea6706572736f6e84a26964a3393531a46e616d65a64c69204c6569a976616c696446726f6db4323032362d30312d30315430303a30303a30305aa776616c6964546fb4323032372d30312d30315430303a30303a30305a",
			`{"messageId":"m-1","op":"AddPerson","person":{"id":"951","name":"Li Lei","validFrom":"2026-01-01T00:00:00Z","validTo":"2027-01-01T00:00:00Z"}}`},
		{&Command{MessageID: "m-1", Op: DeletePerson, Person: Person{ID: "951"}},
			"83a96d6573736167654964a36d2d31a26f70ac44656c657465506572736f6ea6706572736f6e84a26964a3393531a46e616d65a0a976616c696446726f6da0a776616c6964546fa0",
			`{"messageId":"m-1","op":"DeletePerson","person":{"id":"951"}}`},
		{&Ack{MessageID: "m-1", Code: 17, Message: "full"},
			"83a96d6573736167654964a36d2d31a4636f646511a76d657373616765a466756c6c",
			`{"messageId":"m-1","code":17,"message":"full"}`},
		{&Heartbeat{DeviceID: "2042253", Time: "2026-11-22T10:00:00Z", Firmware: "v3", Persons: 12},
			"84a86465766963654964a732303432323533a474696d65b4323032362d31312d32325431303a30303a30305aa86669726d77617265a27633a7706572736f6e730c",
			`{"deviceId":"2042253","time":"2026-11-22T10:00:00Z","firmware":"v3","persons":12}`},
	} {
		b, err := g.m.AppendMsg(nil)
		if err != nil || hex.EncodeToString(b) != g.msgp {
			t.Errorf("%T msgp:\ngot  %x, %v\nwant %s", g.m, b, err, g.msgp)
		}
		j, err := g.m.AppendJSON(nil)
		if err != nil || string(j) != g.jsonText {
			t.Errorf("%T JSON:\ngot  %s, %v\nwant %s", g.m, j, err, g.jsonText)
		}
	}
}
