package serial

import (
	"bytes"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// A PutFace of 4 KiB of face data, its messageId at the protocol's bound, travels in one
// frame of the default size and comes out byte for byte.
func TestDefaultFrameCarriesA4KiBFaceChunk(t *testing.T) {
	if n := face.ChunkLimitFor(DefaultMaxPayload); n < 4096 {
		t.Fatalf("the default frame holds a chunk of only %d bytes", n)
	}
	data := bytes.Repeat([]byte{0xFA, 0xCE, 0x00, 0x7F}, 1024) // SOF bytes inside the payload
	cmd := face.Command{MessageID: strings.Repeat("m", face.MaxIDLen), Op: face.PutFace,
		Face: face.FaceChunk{SHA256: face.FaceSHA256(data), Size: face.MaxFaceSize, Offset: face.MaxFaceSize - 4096, Data: data}}
	frame, err := AppendMessage(nil, KindCommand, &cmd)
	if err != nil {
		t.Fatal(err)
	}
	f, rest, err := ReadFrame(frame, 0)
	if err != nil || len(rest) != 0 {
		t.Fatalf("ReadFrame: %v, %d bytes left", err, len(rest))
	}
	got, err := face.ParseCommandMsg(f.Payload)
	if err != nil || !got.Equal(&cmd) {
		t.Fatalf("decoded %+v, %v", got.Face.Offset, err)
	}
}
