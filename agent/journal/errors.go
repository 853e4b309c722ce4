package journal

import (
	"errors"
	"fmt"
)

// Every sentinel error of the package. Wrapped errors keep them reachable with errors.Is.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("journal: closed")

	// ErrLocked is returned by Open when another Journal (in this process or another) holds
	// the directory's LOCK file.
	ErrLocked = errors.New("journal: directory is locked by another process")

	// ErrNoSpace is returned (wrapped, with the file and the cause) when a write failed because
	// the disk is full. The journal truncates the failed batch away and refuses every later
	// append; what was durable before stays readable. Free space, then Close and Open again,
	// or Reset.
	ErrNoSpace = errors.New("journal: no space left on device; refusing appends")

	// ErrFailed is returned (wrapped with the cause) by every append after a write or fsync
	// failed for a reason other than a full disk. After a failed fsync the kernel may have
	// dropped dirty pages, so the journal never retries one: Close and Open again, or Reset
	// (which writes the owner's state anew and reads nothing the failure left in doubt).
	ErrFailed = errors.New("journal: a write or fsync failed; refusing appends")

	// ErrTooLarge is returned by Append for a record larger than Options.MaxRecordSize.
	ErrTooLarge = errors.New("journal: record too large")

	// ErrEmptyRecord is returned by Append for an empty record (zero-length frames are how a
	// zero-filled tail looks, so they are never written).
	ErrEmptyRecord = errors.New("journal: empty record")

	// ErrReplayAfterAppend is returned by Replay once an append has been made on this Journal.
	ErrReplayAfterAppend = errors.New("journal: Replay must be called before the first append")

	// ErrBadFormat is returned (wrapped in a *CorruptError) for a file whose header is not a
	// journal header of a version this package reads.
	ErrBadFormat = errors.New("journal: not a journal file of a known version")

	// ErrChecksum is returned (wrapped in a *CorruptError) for a frame whose header or payload
	// checksum does not match.
	ErrChecksum = errors.New("journal: checksum mismatch")
)

// CorruptError says where a damaged record was found: a record that is not part of a torn
// tail, so truncating it would drop records written after it. Open returns it unless
// Options.SkipCorrupt is set.
type CorruptError struct {
	File   string // path of the segment or snapshot
	Offset int64  // byte offset of the damaged frame
	Err    error  // ErrChecksum, ErrBadFormat or a framing error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt record in %s at offset %d: %v", e.File, e.Offset, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }
