package agent

import (
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// The face store is the outbox's FaceSource: the face step reads each chunk from it.
var _ outbox.FaceSource = (*faces.Store)(nil)

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
