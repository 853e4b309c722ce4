package resp3

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// validMessages gathers every valid whole message the fixtures hold.
func validMessages() [][]byte {
	var msgs [][]byte
	for _, f := range scalarFixtures {
		if !Kind(f.in[0]).IsAggregate() || f.in[1] == '0' || f.in[1] == '-' {
			msgs = append(msgs, []byte(f.in))
		}
	}
	for _, f := range treeFixtures {
		msgs = append(msgs, []byte(f.in))
	}
	for _, f := range docRequests {
		msgs = append(msgs, []byte(f.in))
	}
	return msgs
}

// TestEveryPrefixIsIncomplete: a proper prefix of a valid message is ErrIncomplete, never
// malformed, for every reader.
func TestEveryPrefixIsIncomplete(t *testing.T) {
	args := make([][]byte, 0, 16)
	for _, msg := range validMessages() {
		if _, err := ParseTree(msg, nil); err != nil {
			t.Fatalf("fixture %q does not parse: %v", msg, err)
		}
		isCommand := msg[0] == '*'
		if isCommand {
			_, err := ParseCommand(msg, args)
			isCommand = err == nil
		}
		for n := 0; n < len(msg); n++ {
			p := msg[:n:n] // capacity-limited: reading past the prefix would panic
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrIncomplete) || IsMalformed(err) {
					t.Fatalf("%s(%q) [prefix %d of %q]: %v, want ErrIncomplete", what, p, n, msg, err)
				}
			}
			_, _, err := ReadTree(p, nil)
			check("ReadTree", err)
			_, err = Skip(p)
			check("Skip", err)
			_, err = ParseTree(p, nil)
			check("ParseTree", err)
			if v, _, err := ReadValue(msg); err == nil && !v.Kind.IsAggregate() {
				_, _, err = ReadValue(p)
				check("ReadValue", err)
			}
			if isCommand {
				_, err = ParseCommand(p, args)
				check("ParseCommand", err)
			}
		}
	}
}

// TestByteAtATime feeds a stream of all messages one byte at a time to a reader that retries
// on ErrIncomplete, as a stream consumer would.
func TestByteAtATime(t *testing.T) {
	var stream []byte
	msgs := validMessages()
	for _, m := range msgs {
		stream = append(stream, m...)
	}
	var buf []byte
	got := 0
	for i := range stream {
		buf = append(buf, stream[i])
		for len(buf) > 0 {
			rest, err := Skip(buf)
			if errors.Is(err, ErrIncomplete) {
				break
			}
			if err != nil {
				t.Fatalf("after %d bytes: %v", i+1, err)
			}
			consumed := buf[:len(buf)-len(rest)]
			if !bytes.Equal(consumed, msgs[got]) {
				t.Fatalf("message %d: read %q, want %q", got, consumed, msgs[got])
			}
			got++
			buf = append(buf[:0], rest...)
		}
	}
	if got != len(msgs) || len(buf) != 0 {
		t.Fatalf("read %d of %d messages, %d bytes left", got, len(msgs), len(buf))
	}
}

// TestRandomSplits cuts a stream of commands at random points and parses it with
// ReadCommand and ReadTree as chunks arrive.
func TestRandomSplits(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	var stream []byte
	var want [][]string
	for range 200 {
		args := randomArgs(rng)
		stream = appendCommand(stream, args)
		want = append(want, args)
	}
	for round := range 20 {
		var buf []byte
		argbuf := make([][]byte, 0, 16)
		tree := make([]Value, 0, 16)
		got := 0
		for off := 0; off < len(stream); {
			n := 1 + rng.IntN(64)
			if off+n > len(stream) {
				n = len(stream) - off
			}
			buf = append(buf, stream[off:off+n]...)
			off += n
			for {
				cmd, rest, err := ReadCommand(buf, argbuf)
				if errors.Is(err, ErrIncomplete) {
					if _, _, terr := ReadTree(buf, tree[:0]); !errors.Is(terr, ErrIncomplete) {
						t.Fatalf("seed %d round %d: ReadCommand incomplete but ReadTree %v", seed, round, terr)
					}
					break
				}
				if err != nil {
					t.Fatalf("seed %d round %d: %v", seed, round, err)
				}
				if !equalArgs(cmd, want[got]) {
					t.Fatalf("seed %d round %d: command %d = %q, want %q", seed, round, got, cmd, want[got])
				}
				tree, _, err = ReadTree(buf, tree[:0])
				if err != nil || len(tree) != len(cmd)+1 {
					t.Fatalf("seed %d: ReadTree disagrees: %d tokens, %v", seed, len(tree), err)
				}
				got++
				buf = append(buf[:0], rest...)
			}
		}
		if got != len(want) {
			t.Fatalf("seed %d round %d: %d of %d commands", seed, round, got, len(want))
		}
	}
}

func appendCommand(dst []byte, args []string) []byte {
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBlobString(dst, a)
	}
	return dst
}

func equalArgs(got [][]byte, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if string(got[i]) != want[i] {
			return false
		}
	}
	return true
}

// randomArgs returns 1..16 arguments of random binary content, lengths spread over the
// one-, two- and three-digit paths.
func randomArgs(rng *rand.Rand) []string {
	args := make([]string, 1+rng.IntN(16))
	for i := range args {
		var n int
		switch rng.IntN(4) {
		case 0:
			n = rng.IntN(10)
		case 1:
			n = 10 + rng.IntN(90)
		case 2:
			n = 100 + rng.IntN(1000)
		default:
			n = rng.IntN(3)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(rng.Uint32())
			if rng.IntN(8) == 0 {
				b[j] = "\r\n$*"[rng.IntN(4)] // make the framing bytes common inside values
			}
		}
		args[i] = string(b)
	}
	return args
}
