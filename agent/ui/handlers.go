package ui

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// jsonHeaders are the headers of every JSON answer: nothing cached, nothing sniffed.
func jsonHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	jsonHeaders(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (u *UI) serveState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, u.o.State())
}

// serveEvents is one live stream: the state now, then each state the hub sends, and a
// keep-alive comment while nothing changes. A write that does not finish within
// WriteTimeout drops the stream; Close ends it.
func (u *UI) serveEvents(w http.ResponseWriter, r *http.Request) {
	c, ok := u.join()
	if !ok {
		u.m.refused()
		http.Error(w, "too many live pages open; try again later", http.StatusServiceUnavailable)
		return
	}
	defer u.leave(c)
	u.Notify() // the hub arms its keep-alive and its offline timer for this stream
	rc := http.NewResponseController(w)
	// The server's read timeout would end the request's context while the stream runs; a
	// client that is gone shows when a write fails.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	write := func(msg []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(u.o.WriteTimeout)); err != nil {
			return false
		}
		if _, err := w.Write(msg); err != nil {
			u.m.dropped()
			return false
		}
		if err := rc.Flush(); err != nil {
			u.m.dropped()
			return false
		}
		return true
	}
	if !write(append([]byte("retry: 2000\n"), stateEvent(u.o.State())...)) {
		return
	}
	for {
		select {
		case <-u.done:
			return
		case <-r.Context().Done():
			return
		case <-c.wake:
			if msg := c.take(); msg != nil && !write(msg) {
				return
			}
		}
	}
}

// actionRequest is the body of POST /api/action.
type actionRequest struct {
	Action string `json:"action"`
	Device string `json:"device"`
}

// actionAnswer is its answer.
type actionAnswer struct {
	OK     bool   `json:"ok"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// serveAction runs an action for a request with credentials in its Authorization header
// (never a cookie: another site's page cannot make a browser send it). Each one is logged
// with who asked.
func (u *UI) serveAction(w http.ResponseWriter, r *http.Request) {
	who, err := u.auth.authorize(r)
	if err != nil {
		u.m.action("unauthorized")
		u.log.Warn("operator action refused", "remote", r.RemoteAddr, "err", err.Error())
		w.Header().Set("WWW-Authenticate", `Bearer realm="faceagent"`) // not Basic: no browser login box
		writeJSON(w, authStatus(err), actionAnswer{Error: err.Error()})
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeJSON(w, http.StatusUnsupportedMediaType, actionAnswer{Error: "want Content-Type: application/json"})
		return
	}
	var req actionRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxActionBody))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, actionAnswer{Error: "want {\"action\":…,\"device\":…}: " + err.Error()})
		return
	}
	if !actions[req.Action] {
		writeJSON(w, http.StatusBadRequest, actionAnswer{Error: "unknown action (pause, resume, retry-failed, purge-failed, resync)"})
		return
	}
	if u.o.Control == nil {
		writeJSON(w, http.StatusServiceUnavailable, actionAnswer{Error: "the agent takes no actions now"})
		return
	}
	result, err := u.o.Control(req.Action, req.Device)
	u.Notify()
	if err != nil {
		u.m.action("failed")
		u.log.Warn("operator action failed", "who", who, "action", req.Action, "device", req.Device, "err", err.Error())
		writeJSON(w, http.StatusConflict, actionAnswer{Error: err.Error()})
		return
	}
	u.m.action("done")
	u.log.Info("operator action", "who", who, "action", req.Action, "device", req.Device, "result", result)
	writeJSON(w, http.StatusOK, actionAnswer{OK: true, Result: result})
}

// ErrNotRunning is for Options.Control while the parts it acts on are not there.
var ErrNotRunning = errors.New("the agent is not running")
