package resp3

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// addSeeds adds every testdata/*.resp file (raw RESP3 bytes: the protocol document's
// requests and responses, each RESP3 type, a few malformed inputs) to the fuzz corpus.
func addSeeds(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.resp"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files in testdata: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkClassified fails unless err is nil, "incomplete", or "malformed" — never both, never
// neither.
func checkClassified(t *testing.T, what string, in []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	inc, bad := errors.Is(err, ErrIncomplete), errors.Is(err, ErrMalformed)
	if inc == bad {
		t.Fatalf("%s(%q): error %v is incomplete=%v malformed=%v", what, in, err, inc, bad)
	}
	if bad {
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(in) {
			t.Fatalf("%s(%q): malformed error %v without a valid offset", what, in, err)
		}
	}
}

// FuzzReadValue: no input panics; every error is classified; what parses re-encodes to the
// same bytes.
//
// Re-encode equality: AppendValue of each token ReadTree returned gives back exactly the bytes
// the token was read from — lengths and counts are accepted only in canonical form, and
// strings, doubles and big numbers keep their text. The one exception is Integer, whose
// text may be non-canonical (":+7", ":007", ":-0"): there the re-encoded token must be the
// canonical decimal of the same value (strconv.FormatInt), and reading it back gives the
// same Int.
func FuzzReadValue(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		in = in[:len(in):len(in)] // reading past the end must panic, not pass silently
		v, rest, err := ReadValue(in)
		checkClassified(t, "ReadValue", in, err)
		if err == nil {
			checkToken(t, in[:len(in)-len(rest)], v)
		}

		tree, rest, err := ReadTree(in, nil)
		checkClassified(t, "ReadTree", in, err)
		skipRest, skipErr := Skip(in)
		if (err == nil) != (skipErr == nil) || !bytes.Equal(rest, skipRest) {
			t.Fatalf("Skip(%q) = %q, %v; ReadTree gave %q, %v", in, skipRest, skipErr, rest, err)
		}
		if err != nil {
			return
		}
		// Tokens in pre-order are contiguous in the input: walk the input with ReadValue
		// and compare each token's bytes with its re-encoding.
		pos := in
		for i, tok := range tree {
			_, next, err := ReadValue(pos)
			if err != nil {
				t.Fatalf("token %d of %q: ReadValue: %v", i, in, err)
			}
			checkToken(t, pos[:len(pos)-len(next)], tok)
			pos = next
		}
		if !bytes.Equal(pos, rest) {
			t.Fatalf("%q: tokens end at %q, ReadTree's rest is %q", in, pos, rest)
		}
		// ReadValue, ParseTree and ParseValue agree with ReadTree on where the value ends.
		if _, err := ParseTree(in[:len(in)-len(rest)], nil); err != nil {
			t.Fatalf("ParseTree of the consumed bytes: %v", err)
		}
	})
}

// checkToken asserts the re-encoding rule above for one token read from raw.
func checkToken(t *testing.T, raw []byte, v Value) {
	t.Helper()
	enc := AppendValue(nil, v)
	if v.Kind == Integer {
		want := ":" + strconv.FormatInt(v.Int, 10) + "\r\n"
		back, err := ParseValue(enc)
		if string(enc) != want || err != nil || back.Int != v.Int {
			t.Fatalf("integer %q re-encoded as %q (read back %d, %v)", raw, enc, back.Int, err)
		}
		return
	}
	if !bytes.Equal(enc, raw) {
		t.Fatalf("token %q (%+v) re-encoded as %q", raw, v, enc)
	}
}

// FuzzParseCommand: no input panics; a parsed command re-encodes to exactly its input; the
// command fast path and the general reader agree on which inputs are commands.
func FuzzParseCommand(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		in = in[:len(in):len(in)]
		args, err := ParseCommand(in, make([][]byte, 0, 8))
		checkClassified(t, "ParseCommand", in, err)

		// The general reader's verdict: an array of 1..8 non-null blob strings filling in.
		tree, terr := ParseTree(in, nil)
		isCommand := terr == nil && tree[0].Kind == Array && tree[0].Len >= 1 && tree[0].Len <= 8 &&
			len(tree) == tree[0].Len+1
		if isCommand {
			for _, v := range tree[1:] {
				if v.Kind != BlobString || v.Len == -1 {
					isCommand = false
				}
			}
		}
		if isCommand != (err == nil) {
			t.Fatalf("%q: ParseCommand err %v, but ParseTree err %v / tree %+v", in, err, terr, tree)
		}
		if errors.Is(terr, ErrIncomplete) && err != nil && !errors.Is(err, ErrIncomplete) &&
			!errors.Is(err, ErrNotCommand) && !errors.Is(err, ErrTooManyElements) {
			t.Fatalf("%q: a valid prefix for ParseTree, but ParseCommand says %v", in, err)
		}
		if errors.Is(err, ErrIncomplete) && !errors.Is(terr, ErrIncomplete) {
			t.Fatalf("%q: ParseCommand wants more bytes, but ParseTree says %v", in, terr)
		}
		if err != nil {
			if len(args) != 0 {
				t.Fatalf("%q: %d args returned with error %v", in, len(args), err)
			}
			return
		}
		enc := AppendArrayHeader(nil, len(args))
		for _, a := range args {
			enc = AppendBlob(enc, a)
		}
		if !bytes.Equal(enc, in) {
			t.Fatalf("command %q re-encoded as %q", in, enc)
		}
	})
}
