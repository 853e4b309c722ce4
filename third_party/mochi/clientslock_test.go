package mqtt

import (
	"strconv"
	"testing"
)

// TestClientsGetByListenerWithWriters: mochi's Server.Close (closeListenerClients) lists a
// listener's clients with Clients.GetByListener while clients come and go (Clients.Add on
// CONNECT, Clients.Delete when a session ends). mochi v2.7.9's GetByListener took the read
// lock twice (its own, then Len's): an Add or Delete waiting between the two blocked the
// second for good, and Close with it (tcpListener works around it; other listeners use
// mochi's closeListenerClients).
func TestClientsGetByListenerWithWriters(t *testing.T) {
	srv := New(&Options{})
	clients := NewClients()
	var some [8]*Client
	for i := range some {
		some[i] = srv.NewClient(nil, "tcp", strconv.Itoa(i), false)
	}
	runAgainst(t, "GetByListener and Add/Delete", func(int) { clients.GetByListener("tcp") }, func(i int) {
		cl := some[i%len(some)]
		clients.Add(cl)
		clients.Delete(cl.ID)
	})
}
