package remote

import (
	"bytes"
	"log/slog"
	"sync"
)

// logMu guards the buffers slogTo writes to.
var logMu sync.Mutex

type lockedWriter struct{ b *bytes.Buffer }

func (w lockedWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return w.b.Write(p)
}

func slogTo(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(lockedWriter{b}, nil)) }
