//go:build !linux

package serial

import (
	"errors"
	"os"
)

// PTY is a pseudo-terminal pair; only implemented on Linux.
type PTY struct {
	Master *os.File
	Path   string
}

// OpenPTY is only implemented on Linux.
func OpenPTY() (*PTY, error) { return nil, errors.New("serial: OpenPTY is only implemented on linux") }

// Close closes both ends.
func (p *PTY) Close() error { return nil }
