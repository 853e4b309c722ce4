package sim

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Packets written at once by several goroutines, each in parts under the lock as paho
// writes them, arrive whole and one after another; reads return the bytes in order.
func TestPacketConnKeepsPacketsWhole(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := newPacketConn(client)
	const writers, packets = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range packets {
				c.Lock()
				// header, body, tail: three writes for one packet, as net.Buffers does
				_, _ = c.Write([]byte{'<'})
				_, _ = fmt.Fprintf(c, "%d:%02d", w, p)
				_, _ = c.Write([]byte{'>'})
				c.Unlock()
			}
		}()
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(server)
		got <- b
	}()
	wg.Wait()
	client.Close()
	b := <-got
	n := 0
	for len(b) > 0 {
		end := bytes.IndexByte(b, '>')
		if b[0] != '<' || end < 0 || bytes.IndexByte(b[1:end], '<') >= 0 {
			t.Fatalf("packet %d interleaved or cut: %q", n, b[:min(len(b), 20)])
		}
		b = b[end+1:]
		n++
	}
	if n != writers*packets {
		t.Fatalf("%d packets arrived, want %d", n, writers*packets)
	}

	// Reads go through the buffer: what the far end wrote comes back in order.
	client, server = net.Pipe()
	defer server.Close()
	c = newPacketConn(client)
	defer c.Close()
	go func() { _, _ = server.Write([]byte("0123456789")) }()
	buf := make([]byte, 4)
	var read []byte
	for len(read) < 10 {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, buf[:k]...)
	}
	if string(read) != "0123456789" {
		t.Fatalf("read %q", read)
	}
}
