package resp3_test

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/resp3"
)

// A state store request, parsed the way the store does it: into a reused argument slice.
func ExampleParseCommand() {
	payload := []byte("*3\r\n$3\r\nset\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n")
	args := make([][]byte, 0, 8) // reuse it for every request
	args, err := resp3.ParseCommand(payload, args)
	if err != nil {
		fmt.Println("-ERR syntax error:", err)
		return
	}
	for _, a := range args {
		fmt.Printf("%s ", a)
	}
	fmt.Println()
	// Output: set SETKEY2 VALUE5
}

// The client side: one reply per payload.
func ExampleParseValue() {
	for _, reply := range []string{"+OK\r\n", ":-1\r\n", "$-1\r\n", "$4\r\n1234\r\n", "-ERR syntax error\r\n"} {
		v, err := resp3.ParseValue([]byte(reply))
		switch {
		case err != nil:
			fmt.Println("bad reply:", err)
		case v.IsNull():
			fmt.Println("missing key")
		case v.Kind == resp3.Integer:
			fmt.Println("integer", v.Int)
		case v.Kind == resp3.SimpleError:
			fmt.Printf("error %q\n", v.Str)
		default:
			fmt.Printf("%s %q\n", v.Kind, v.Str)
		}
	}
	// Output:
	// simple string "OK"
	// integer -1
	// missing key
	// blob string "1234"
	// error "ERR syntax error"
}

// Nested values: ReadTree lists every token in order; the elements follow their header.
func ExampleReadTree() {
	notification := []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n")
	tree, rest, err := resp3.ReadTree(notification, make([]resp3.Value, 0, 8))
	if err != nil {
		panic(err)
	}
	fmt.Println(tree[0].Kind, tree[0].Len, len(rest))
	for _, v := range tree[1:] {
		fmt.Printf("%s ", v.Str)
	}
	fmt.Println()
	// Output:
	// array 4 0
	// NOTIFY SET VALUE abc
}

// Writing: append to a reused buffer.
func ExampleAppendArrayHeader() {
	buf := make([]byte, 0, 128)
	buf = resp3.AppendArrayHeader(buf, 2)
	buf = resp3.AppendBlobString(buf, "GET")
	buf = resp3.AppendBlob(buf, []byte("SETKEY2"))
	fmt.Printf("%q\n", buf)

	buf = resp3.AppendError(buf[:0], "ERR syntax error")
	buf = resp3.AppendInt(buf, -1)
	buf = resp3.AppendNullBlob(buf)
	fmt.Printf("%q\n", buf)
	// Output:
	// "*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n"
	// "-ERR syntax error\r\n:-1\r\n$-1\r\n"
}

// Incomplete input is not malformed input.
func Example_errors() {
	_, _, err := resp3.ReadValue([]byte("$10\r\nabc"))
	fmt.Println(errors.Is(err, resp3.ErrIncomplete), resp3.IsMalformed(err))

	_, _, err = resp3.ReadValue([]byte("$3\r\nabcXY"))
	var se *resp3.SyntaxError
	fmt.Println(errors.Is(err, resp3.ErrMissingCRLF), errors.As(err, &se), se.Offset)
	fmt.Println(err)
	// Output:
	// true false
	// true true 7
	// resp3: missing CRLF at offset 7
}
