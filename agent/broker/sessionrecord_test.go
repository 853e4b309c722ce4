package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// sessionRecordSeeds are the records in testdata/sessionrecords.
func sessionRecordSeeds(t testing.TB) map[string][]byte {
	paths, err := filepath.Glob(filepath.Join("testdata", "sessionrecords", "*.bin"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	seeds := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds[filepath.Base(p)] = b
	}
	return seeds
}

// TestSessionRecordSeeds: the testdata records decode (or fail) as their names say, and
// their values are mochi's storage types.
func TestSessionRecordSeeds(t *testing.T) {
	for name, rec := range sessionRecordSeeds(t) {
		var ops []sessionOp
		err := decodeSessionOps(rec, func(op sessionOp) error { ops = append(ops, op); return nil })
		bad := name == "truncated.bin" || name == "badversion.bin"
		if bad != (err != nil) || err != nil && !errors.Is(err, errBadSessionRecord) {
			t.Fatalf("%s: %v", name, err)
		}
		if bad {
			continue
		}
		if len(ops) == 0 {
			t.Fatalf("%s: no ops", name)
		}
		for _, op := range ops {
			if err := checkSessionValue(op); err != nil {
				t.Fatalf("%s: %s: %v", name, describeKey(op.key), err)
			}
		}
	}
	var ops []sessionOp
	_ = decodeSessionOps(sessionRecordSeeds(t)["session.bin"], func(op sessionOp) error { ops = append(ops, op); return nil })
	var m storage.Message
	if err := m.UnmarshalBinary(ops[2].value); err != nil || m.PacketID != 7 || ops[2].key != inflightKey("back-office", 7) {
		t.Fatalf("in-flight seed: %+v %v", m, err)
	}
}

// checkSessionValue decodes a put's value as the storage type of its key.
func checkSessionValue(op sessionOp) error {
	if op.value == nil {
		return nil
	}
	kind, _, _, err := parseKey(op.key)
	if err != nil {
		return err
	}
	switch kind {
	case kindClient:
		return new(storage.Client).UnmarshalBinary(op.value)
	case kindSubscription:
		return new(storage.Subscription).UnmarshalBinary(op.value)
	default:
		return new(storage.Message).UnmarshalBinary(op.value)
	}
}

func TestSessionKeys(t *testing.T) {
	for _, c := range []struct {
		key          string
		kind         byte
		client, rest string
	}{
		{clientKey("a:b"), kindClient, "a:b", ""},
		{subscriptionKey("urn:dev:1", "a/+/#"), kindSubscription, "urn:dev:1", "a/+/#"},
		{inflightKey("x", 65535), kindInflight, "x", "\xff\xff"},
		{inflightKey("", 1), kindInflight, "", "\x00\x01"},
		{retainedKey("t/1"), kindRetained, "", "t/1"},
	} {
		kind, client, rest, err := parseKey(c.key)
		if err != nil || kind != c.kind || client != c.client || rest != c.rest {
			t.Errorf("parseKey(%q) = %q %q %q %v", c.key, kind, client, rest, err)
		}
	}
	for _, bad := range []string{"", "C", "C\x05ab", "X\x00", "I\x01a\x00\x00", "I\x01a\x01", "R\x01at", "C\x01ab"} {
		if _, _, _, err := parseKey(bad); !errors.Is(err, errBadSessionRecord) {
			t.Errorf("parseKey(%q) = %v", bad, err)
		}
	}
}

// FuzzSessionRecord: any bytes decode without a panic, to ops that encode and decode to
// the same ops, whose values decode or fail cleanly, and that a committer applies.
func FuzzSessionRecord(f *testing.F) {
	for _, rec := range sessionRecordSeeds(f) {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		var ops []sessionOp
		if err := decodeSessionOps(rec, func(op sessionOp) error { ops = append(ops, op); return nil }); err != nil {
			if !errors.Is(err, errBadSessionRecord) {
				t.Fatalf("error %v does not wrap errBadSessionRecord", err)
			}
			return
		}
		var again []sessionOp
		if err := decodeSessionOps(appendSessionOps(nil, ops), func(op sessionOp) error { again = append(again, op); return nil }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%q", again) != fmt.Sprintf("%q", ops) {
			t.Fatalf("round trip %q, want %q", again, ops)
		}
		c := newCommitter(nil, slog.New(slog.DiscardHandler))
		for _, op := range ops {
			_ = checkSessionValue(op)
			c.apply(op)
		}
		for client, keys := range c.byClient {
			for k := range keys {
				if _, ok := c.live[k]; !ok || keyClient(k) != client {
					t.Fatalf("index holds %s for %q", describeKey(k), client)
				}
			}
		}
	})
}
