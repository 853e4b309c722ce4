//go:build !linux

package serial

import (
	"errors"
	"time"
)

// tty is a serial port; only implemented on Linux.
type tty struct{}

func openTTY(string, *lineMode, time.Duration) (*tty, error) {
	return nil, errors.New("serial ports are only implemented on linux")
}

func (*tty) Read([]byte) (int, error) {
	return 0, errors.New("serial ports are only implemented on linux")
}
func (*tty) Write([]byte) (int, error) {
	return 0, errors.New("serial ports are only implemented on linux")
}
func (*tty) Close() error { return nil }
