package resp3

import (
	"errors"
	"strings"
	"testing"
)

// docRequests are the protocol document's request examples, verbatim (its sections
// "Request format" and "KEYNOTIFY request messages"; docs/design.md "State store wire
// facts" names the document), with the arguments each must parse to.
var docRequests = []struct {
	name string
	in   string
	args []string
}{
	// *3 = three arguments; $3 "set"; $7 "SETKEY2"; $6 "VALUE5".
	{"set", "*3\r\n$3\r\nset\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n", []string{"set", "SETKEY2", "VALUE5"}},
	// *2; $3 "get"; $7 "SETKEY2".
	{"get", "*2\r\n$3\r\nget\r\n$7\r\nSETKEY2\r\n", []string{"get", "SETKEY2"}},
	// *2; $3 "del"; $7 "SETKEY2".
	{"del", "*2\r\n$3\r\ndel\r\n$7\r\nSETKEY2\r\n", []string{"del", "SETKEY2"}},
	// *3; $4 "vdel"; $7 "SETKEY2"; $3 "ABC" (the value that must match).
	{"vdel", "*3\r\n$4\r\nvdel\r\n$7\r\nSETKEY2\r\n$3\r\nABC\r\n", []string{"vdel", "SETKEY2", "ABC"}},
	// *2; $9 "KEYNOTIFY"; $7 "SOMEKEY".
	{"keynotify", "*2\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n", []string{"KEYNOTIFY", "SOMEKEY"}},
	// *3; ... "STOP".
	{"keynotify stop", "*3\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n$4\r\nSTOP\r\n", []string{"KEYNOTIFY", "SOMEKEY", "STOP"}},
	// *4 NOTIFY SET VALUE abc: the notification for SOMEKEY set to abc.
	{"notify set", "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n", []string{"NOTIFY", "SET", "VALUE", "abc"}},
	// *2 NOTIFY DELETE (docs/design.md, wire fact 3: the document's "DEL" is "DELETE" on the wire).
	{"notify delete", "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n", []string{"NOTIFY", "DELETE"}},
	// The lock example: SET LockName Client1 NEX PX 10000 (wire fact 2: NEX takes no argument).
	{"set nex px", "*6\r\n$3\r\nSET\r\n$8\r\nLockName\r\n$7\r\nClient1\r\n$3\r\nNEX\r\n$2\r\nPX\r\n$5\r\n10000\r\n",
		[]string{"SET", "LockName", "Client1", "NEX", "PX", "10000"}},
	// An empty value is legal.
	{"set empty", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n", []string{"SET", "k", ""}},
	// A 10-argument array takes the general count path; a 100-byte argument the general length path.
	{"ten args", "*10\r\n" + strings.Repeat("$1\r\nx\r\n", 10), strings.Split(strings.Repeat("x", 10), "")},
	{"long arg", "*1\r\n$100\r\n" + strings.Repeat("v", 100) + "\r\n", []string{strings.Repeat("v", 100)}},
}

func TestParseCommandDocExamples(t *testing.T) {
	args := make([][]byte, 0, 16)
	for _, f := range docRequests {
		t.Run(f.name, func(t *testing.T) {
			got, err := ParseCommand([]byte(f.in), args)
			if err != nil {
				t.Fatalf("ParseCommand: %v", err)
			}
			if len(got) != len(f.args) {
				t.Fatalf("got %d args %q, want %q", len(got), got, f.args)
			}
			for i := range got {
				if string(got[i]) != f.args[i] {
					t.Fatalf("arg %d = %q, want %q", i, got[i], f.args[i])
				}
				if cap(got[i]) != len(got[i]) {
					t.Fatalf("arg %d: cap %d, want capacity-limited view", i, cap(got[i]))
				}
			}
			// The writer produces the same bytes.
			enc := AppendArrayHeader(nil, len(f.args))
			for _, a := range f.args {
				enc = AppendBlobString(enc, a)
			}
			if string(enc) != f.in {
				t.Fatalf("encoded %q, want %q", enc, f.in)
			}
			// Pipelined: ReadCommand returns what follows.
			_, rest, err := ReadCommand([]byte(f.in+f.in), args)
			if err != nil || string(rest) != f.in {
				t.Fatalf("ReadCommand: rest %q, err %v", rest, err)
			}
			if _, err := ParseCommand([]byte(f.in+"+"), args); !errors.Is(err, ErrTrailingBytes) {
				t.Fatalf("trailing byte: %v, want ErrTrailingBytes", err)
			}
		})
	}
}

func TestParseCommandErrors(t *testing.T) {
	for _, f := range []struct {
		name string
		in   string
		want error
	}{
		{"not array", "$3\r\nGET\r\n", ErrNotCommand},
		{"truncated blob, not array", "$10\r\nGET", ErrNotCommand},
		{"truncated integer arg", "*2\r\n$3\r\nGET\r\n:1", ErrNotCommand},
		{"simple string", "+OK\r\n", ErrNotCommand},
		{"unknown type", "GET key\r\n", ErrUnknownType},
		{"empty array", "*0\r\n", ErrNotCommand},
		{"null array", "*-1\r\n", ErrNotCommand},
		{"null arg", "*2\r\n$3\r\nGET\r\n$-1\r\n", ErrNotCommand},
		{"integer arg", "*2\r\n$3\r\nGET\r\n:1\r\n", ErrNotCommand},
		{"nested array", "*2\r\n$3\r\nGET\r\n*1\r\n$1\r\na\r\n", ErrNotCommand},
		{"garbage arg", "*2\r\n$3\r\nGET\r\nxyz", ErrUnknownType},
		{"too many", "*17\r\n", ErrTooManyElements},
		{"over MaxElements", "*99999999\r\n", ErrTooManyElements},
		{"negative count", "*-2\r\n", ErrNegativeLength},
		{"negative len", "*1\r\n$-2\r\n", ErrNegativeLength},
		{"bad len", "*1\r\n$x\r\n", ErrInvalidLength},
		{"leading zero", "*1\r\n$03\r\nGET\r\n", ErrInvalidLength},
		{"leading zero count", "*01\r\n$3\r\nGET\r\n", ErrInvalidLength},
		{"count overflow", "*99999999999999999999999\r\n", ErrOverflow},
		{"len overflow", "*1\r\n$99999999999999999999999\r\n", ErrOverflow},
		{"too large", "*1\r\n$999999999\r\n", ErrTooLarge},
		{"missing CRLF after arg", "*1\r\n$3\r\nGETxx", ErrMissingCRLF},
		{"LF only after arg", "*1\r\n$3\r\nGET\n\n", ErrMissingCRLF},
		{"short arg", "*1\r\n$2\r\nGET\r\n", ErrMissingCRLF},
		{"trailing", "*1\r\n$3\r\nGET\r\n\r\n", ErrTrailingBytes},
	} {
		t.Run(f.name, func(t *testing.T) {
			args := make([][]byte, 0, 16)
			got, err := ParseCommand([]byte(f.in), args)
			if !errors.Is(err, f.want) || !IsMalformed(err) {
				t.Fatalf("ParseCommand(%q) = %q, %v; want %v", f.in, got, err, f.want)
			}
			if len(got) != 0 {
				t.Fatalf("args %q returned with an error", got)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("%v is not a *SyntaxError", err)
			}
		})
	}
}

func TestParseCommandNilArgs(t *testing.T) {
	if _, err := ParseCommand([]byte("*1\r\n$3\r\nGET\r\n"), nil); !errors.Is(err, ErrTooManyElements) {
		t.Fatalf("nil args: %v, want ErrTooManyElements", err)
	}
}
