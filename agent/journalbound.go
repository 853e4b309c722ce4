package agent

import "github.com/seed0e69bba5/faceagent/agent/journal"

// The agent's logs compact by dead records (a count each: compactForwarded,
// compactDeadLetters, the outbox's CompactAfter) and also by dead bytes, so that large
// records cannot pile up under the count: a deadletter carries the refused message (up to
// intake.max_message_size), a forwarded ack the terminal's message. smallLogSegment is the
// segment size of the forward and deadletter logs (journalOptions): their files stay within
// their live bytes plus max(smallLogSegment, live) dead bytes plus the record that crossed
// it, and the open segment's reserved blocks (smallLogSegment) and, while a snapshot is
// written, the snapshot (live) come on top (agent/doc.go, "Disk").
const smallLogSegment = 4 << 20

// recordOverhead is what a small log's record adds to its payload in the files, at most: the
// journal's frame and the record's own header (version, kind, uvarint id, device id length).
const recordOverhead = journal.FrameOverhead + 2 + 10 + 2

// deadBytesDue reports whether j's files hold more dead bytes than both floor and live, the
// bytes its live records take.
func deadBytesDue(j *journal.Journal, live, floor int64) bool {
	return j.Stats().FileBytes-live > max(floor, live)
}
