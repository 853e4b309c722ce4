package agent

import (
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// msgpSplit accounts for every byte: an ack {"messageId":"m-1","code":0,"message":""} is
// a map header (1), three keys (10+5+8), a string prefix for "m-1" (1) and for "" (1), and
// values "m-1" (3) and the fixint 0 (1).
func TestMsgpSplit(t *testing.T) {
	a := face.Ack{MessageID: "m-1"}
	b, err := a.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	enc, val, rest, err := msgpSplit(b, false)
	if err != nil || len(rest) != 0 || enc != 26 || val != 4 || enc+val != len(b) {
		t.Fatalf("split %d bytes into encoding %d, values %d, rest %d (%v); want 26, 4, 0", len(b), enc, val, len(rest), err)
	}
	data := make([]byte, 1000)
	c := face.Command{MessageID: "f1", Op: face.PutFace, Face: face.FaceChunk{SHA256: face.FaceSHA256(data), Size: 1000, Data: data}}
	b, _ = c.AppendMsg(nil)
	enc, val, _, err = msgpSplit(b, false)
	// values: "f1" 2, "PutFace" 7, the hash 64, size 2 (uint16), offset 1 (fixint), data 1000
	if err != nil || val != 2+7+64+2+1+1000 || enc+val != len(b) {
		t.Fatalf("PutFace: encoding %d, values %d of %d (%v)", enc, val, len(b), err)
	}
}
