//go:build !linux

package journal

// preallocate is Linux only (fallocate with FALLOC_FL_KEEP_SIZE); elsewhere segments grow
// as they are written.
func preallocate(File, int64) (bool, error) { return false, nil }
