package agent

import (
	"errors"
	"fmt"
	"io"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// storeFaces is the face store as the outbox's FaceSource: the face step reads each chunk
// from it.
type storeFaces struct{ st *faces.Store }

var _ outbox.FaceSource = storeFaces{}

func (s storeFaces) FaceSize(sha string) (int64, error) {
	sum, err := faces.ParseSum(sha)
	if err != nil {
		return 0, err
	}
	n, ok := s.st.Size(sum)
	if !ok {
		return 0, fmt.Errorf("%w: %s", faces.ErrNotFound, sha[:16])
	}
	return n, nil
}

func (s storeFaces) ReadFace(sha string, p []byte, off int64) (int, error) {
	sum, err := faces.ParseSum(sha)
	if err != nil {
		return 0, err
	}
	f, err := s.st.Open(sum)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if n == len(p) && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// faceChunk is the PutFace chunk size for device d: its own face_chunk, else [faces]
// chunk_serial for a serial terminal (at most what one frame carries), chunk_mqtt for an
// MQTT one.
func faceChunk(cfg *config.Config, d *config.Device) int {
	if d.FaceChunk > 0 {
		return int(d.FaceChunk) // validated against its transport's bound
	}
	if d.Transport == config.TransportSerial {
		return min(int(cfg.Faces.ChunkSerial), face.ChunkLimitFor(serial.DefaultMaxPayload))
	}
	return int(cfg.Faces.ChunkMQTT)
}
