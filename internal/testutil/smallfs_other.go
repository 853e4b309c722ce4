//go:build !linux

package testutil

import "testing"

// SmallFS skips t: a size-limited filesystem is mounted on Linux only.
func SmallFS(t testing.TB, size int64) string {
	t.Skip("a size-limited filesystem is mounted on Linux only")
	return ""
}

// FillFS skips t (SmallFS).
func FillFS(t testing.TB, dir string) (free func()) {
	t.Skip("a size-limited filesystem is mounted on Linux only")
	return nil
}

// FreeBytes skips t (SmallFS).
func FreeBytes(t testing.TB, dir string) int64 {
	t.Skip("a size-limited filesystem is mounted on Linux only")
	return 0
}
