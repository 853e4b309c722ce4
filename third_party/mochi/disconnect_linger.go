package mqtt

import (
	"errors"
	"io"
	"os"
	"time"
)

// DisconnectLinger bounds how long a connection stays open after the server wrote a
// DISCONNECT to it: its write side is shut (the peer reads the DISCONNECT, then end of
// stream) and what the peer still sends is read and dropped, until the peer closes or
// DisconnectLinger has passed; then the connection is closed.
//
// faceagent patch (DISCONNECT delivered): upstream closed the socket right after the
// DISCONNECT. A peer that was still sending when the server found a fault in its packets
// (the usual case: a client exceeding the Receive Maximum is sending QoS 1/2 messages,
// and answers each PUBREC it reads with a PUBREL) wrote to a closed socket; the kernel
// answered with a reset, the peer's next write failed, and it reported a broken
// connection instead of the reason code, or the reset threw away what it had not yet
// read, the DISCONNECT included. Closing only once the peer stopped sending (or the bound
// passed) is the lingering close HTTP servers do for the same reason. Upstream's way to the
// same end, Compatibilities.PassiveClientDisconnect, never closes the connection at all
// ([MQTT-3.14.4-2]: the sender of a DISCONNECT closes the connection).
const DisconnectLinger = time.Second

// closeWriter is a connection whose write side can be shut on its own (*net.TCPConn,
// *tls.Conn, and connections that wrap them and say so).
type closeWriter interface {
	CloseWrite() error
}

// States of ClientState.linger.
const (
	lingerNone       uint32 = iota // Stop closes the connection
	lingerWanted                   // a DISCONNECT was written: Stop shuts the write side, the reader drains
	lingerReaderGone               // the reader has finished: Stop closes the connection
)

// lingerOnStop makes the client's Stop shut the connection's write side instead of
// closing it (see DisconnectLinger); DisconnectClient calls it once its DISCONNECT is
// written. Once the reader has finished (finishLinger) nobody would drain and close the
// connection: then Stop closes it as before. faceagent patch (DISCONNECT delivered).
func (cl *Client) lingerOnStop() {
	if cl.Net.Conn != nil {
		cl.State.linger.CompareAndSwap(lingerNone, lingerWanted)
	}
}

// lingering reports whether Stop is to leave the connection to the reader's drain.
func (cl *Client) lingering() bool {
	return cl.Net.Conn != nil && cl.State.linger.Load() == lingerWanted
}

// stopLingering is Stop's part for a lingering client, before it cancels the client's
// open context: the write side is shut, after the DISCONNECT already written.
// faceagent patch (DISCONNECT delivered).
func (cl *Client) stopLingering() {
	if cw, ok := cl.Net.Conn.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
}

// wakeReader is Stop's part for a lingering client once its open context is cancelled:
// a read in progress on another goroutine returns at once (its connection is not closed),
// and the read loop ends, having seen the client closed (Read checks after each deadline
// refresh). faceagent patch (DISCONNECT delivered).
func (cl *Client) wakeReader() {
	_ = cl.Net.Conn.SetReadDeadline(time.Now())
}

// finishLinger runs on the client's reader goroutine once its read loop has ended. For a
// client that was sent a DISCONNECT it reads and drops the peer's bytes until the peer
// closes or DisconnectLinger has passed, then closes the connection; nothing else reads
// the connection by then. Otherwise it records that the reader is gone, so that a later
// Stop closes the connection itself. faceagent patch (DISCONNECT delivered).
func (cl *Client) finishLinger() {
	if cl.Net.Conn == nil || cl.State.linger.CompareAndSwap(lingerNone, lingerReaderGone) {
		return
	}
	end := time.Now().Add(DisconnectLinger)
	woken := false
	for {
		_ = cl.Net.Conn.SetReadDeadline(end)
		_, err := io.Copy(io.Discard, cl.Net.Conn)
		// Stop's wakeReader may come after the deadline above (DisconnectClient stops the
		// client just after asking for the linger): drain on, once, to the end.
		if woken || !errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(end) {
			break
		}
		woken = true
	}
	_ = cl.Net.Conn.Close()
}
