package sswire

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestAppendNotifyTopic(t *testing.T) {
	// The protocol document's example.
	const want = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
	if got := string(AppendNotifyTopic(nil, []byte("client-id1"), []byte("SOMEKEY"))); got != want {
		t.Fatalf("AppendNotifyTopic = %q, want %q", got, want)
	}
	const prefix = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/"
	if got := string(AppendNotifyTopic(nil, []byte("client-id1"), nil)); got != prefix {
		t.Fatalf("AppendNotifyTopic(no key) = %q, want %q", got, prefix)
	}
	if got := string(AppendNotifyTopic([]byte("x"), nil, nil)); got != "x"+NotifyTopicPrefix+"//command/notify/" {
		t.Fatalf("AppendNotifyTopic appended to dst: %q", got)
	}
}

func TestAppendUpperHex(t *testing.T) {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	if got, want := string(AppendUpperHex(nil, b)), strings.ToUpper(hex.EncodeToString(b)); got != want {
		t.Fatalf("AppendUpperHex = %q, want %q", got, want)
	}
}

func TestAppendNotifyTopicAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		_ = AppendNotifyTopic(buf[:0], []byte("client-id1"), []byte("SOMEKEY"))
	}); n != 0 {
		t.Fatalf("AppendNotifyTopic: %v allocs, want 0", n)
	}
}
