package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-disk layout (see doc.go for the full description).
//
//	file header (16 bytes): kind[6] "FAJRNL"|"FASNAP", version u16 LE (=1), number u64 LE
//	frame:  length u32 LE | crc32c(payload) u32 LE | crc32c(first 8 header bytes) u32 LE | payload
//
// The header checksum lets recovery tell a frame start from noise cheaply when it searches
// the bytes after a damaged frame for a later valid one.
const (
	fileHeaderSize  = 16
	frameHeaderSize = 12
	formatVersion   = 1
)

// FrameOverhead is what the journal adds to each record in a file: its frame header. An
// owner that compacts by bytes counts a live record as this plus its own length.
const FrameOverhead = frameHeaderSize

var (
	segmentKind  = [6]byte{'F', 'A', 'J', 'R', 'N', 'L'}
	snapshotKind = [6]byte{'F', 'A', 'S', 'N', 'A', 'P'}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	errShortFrame = errors.New("frame runs past the end of the file")
	errBadLength  = errors.New("frame length out of range")
)

func appendFileHeader(dst []byte, kind [6]byte, number uint64) []byte {
	dst = append(dst, kind[:]...)
	dst = binary.LittleEndian.AppendUint16(dst, formatVersion)
	return binary.LittleEndian.AppendUint64(dst, number)
}

// parseFileHeader checks b's header and returns the file's number.
func parseFileHeader(b []byte, kind [6]byte) (uint64, error) {
	if len(b) < fileHeaderSize {
		return 0, fmt.Errorf("%w: header is %d bytes", ErrBadFormat, len(b))
	}
	if [6]byte(b[:6]) != kind {
		return 0, fmt.Errorf("%w: magic %q", ErrBadFormat, b[:6])
	}
	if v := binary.LittleEndian.Uint16(b[6:8]); v != formatVersion {
		return 0, fmt.Errorf("%w: version %d", ErrBadFormat, v)
	}
	return binary.LittleEndian.Uint64(b[8:16]), nil
}

// appendFrame appends one framed record to dst.
func appendFrame(dst, payload []byte) []byte {
	// The header is built in dst itself: a local array handed to crc32 (an indirect call)
	// would escape, one allocation per record.
	n := len(dst)
	dst = append(dst, make([]byte, frameHeaderSize)...)
	h := dst[n : n+frameHeaderSize]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(h[:8], castagnoli))
	return append(dst, payload...)
}

// readFrame decodes the frame at b[off:]. It returns the payload (a view into b) and the
// offset just past the frame.
func readFrame(b []byte, off int, maxRecord int) (payload []byte, next int, err error) {
	rest := b[off:]
	if len(rest) < frameHeaderSize {
		return nil, off, errShortFrame
	}
	h := rest[:frameHeaderSize]
	if crc32.Checksum(h[:8], castagnoli) != binary.LittleEndian.Uint32(h[8:12]) {
		return nil, off, ErrChecksum
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	if n == 0 || int64(n) > int64(maxRecord) {
		return nil, off, errBadLength
	}
	if int64(len(rest)-frameHeaderSize) < int64(n) {
		return nil, off, errShortFrame
	}
	payload = rest[frameHeaderSize : frameHeaderSize+int(n)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(h[4:8]) {
		return nil, off, ErrChecksum
	}
	return payload, off + frameHeaderSize + int(n), nil
}

// nextValidFrame returns the offset of the first complete, valid frame starting after
// from, or -1. It is only called after damage was found, so its cost (one 8-byte checksum
// per offset) is paid on the damaged path alone.
func nextValidFrame(b []byte, from int, maxRecord int) int {
	for off := from + 1; off+frameHeaderSize <= len(b); off++ {
		if _, _, err := readFrame(b, off, maxRecord); err == nil {
			return off
		}
	}
	return -1
}
