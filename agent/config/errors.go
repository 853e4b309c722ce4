package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrTooLarge is returned (wrapped in an *Error) when a config file exceeds MaxFileSize.
var ErrTooLarge = errors.New("config file too large")

// Error is one thing wrong with a config file, printed as "FILE:LINE: key: what is wrong"
// (the line is left out when the key is not written in the file, for instance when a
// default is invalid in combination with another key).
type Error struct {
	File string // as given to Load; "" for in-memory input
	Line int    // 1-based; 0 when unknown
	Key  string // "dispatch.max_tries", "devices[2].baud"; "" for syntax errors
	Msg  string
	Err  error // the cause, if any (errors.Is/As reach it)
}

func (e *Error) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "config"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one file, in line order. Load returns it (as error)
// when there is at least one; each prints on its own line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.Is and errors.As look at every problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		li, lj := es[i].Line, es[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0 // errors without a line go last
		}
		return li < lj
	})
	return es
}
