package outbox

//go:generate go run github.com/tinylib/msgp -file=record.go -o=record_gen.go -tests=false -io=false -unexported

// record is one journal entry of the message table. Encoded with msgp as a map with short
// keys: a decoder skips keys it does not know, so a later release reads today's files and
// today's release ignores fields added later. recordVersion is written into every record;
// kinds are numbered once and never reused. Records are decoded with decodeRecord, which
// checks the ids count against the bytes left; the generated UnmarshalMsg makes the ids
// slice as long as the header claims and is only the tests' reference decoder.
type record struct {
	Version  uint8    `msg:"v"`
	Kind     uint8    `msg:"k"`
	ID       string   `msg:"id,omitempty"`  // message id
	IDs      []string `msg:"ids,omitempty"` // kindReported, kindPurge, kindReset
	Task     string   `msg:"t,omitempty"`
	Device   string   `msg:"d,omitempty"`
	Op       string   `msg:"op,omitempty"`
	Person   string   `msg:"p,omitempty"`
	Payload  []byte   `msg:"b,omitempty"`
	Ord      uint64   `msg:"o,omitempty"`  // intake order, the per-device FIFO key
	At       int64    `msg:"at,omitempty"` // when the event happened, unix ns
	Added    int64    `msg:"ad,omitempty"`
	Expires  int64    `msg:"ex,omitempty"`
	Next     int64    `msg:"nx,omitempty"` // scheduled: earliest next attempt; in flight: ack deadline
	Done     int64    `msg:"dn,omitempty"` // terminal: when it finished
	Tries    uint32   `msg:"n,omitempty"`
	Status   uint8    `msg:"s,omitempty"`
	Err      string   `msg:"e,omitempty"`
	Reported bool     `msg:"r,omitempty"`
	Paused   bool     `msg:"pa,omitempty"`
	Outdated bool     `msg:"od,omitempty"` // kindItem: a later command for the same person on the device was added
	NoResult bool     `msg:"nr,omitempty"` // kindAdd, kindItem: Task.NoResult
}

const recordVersion = 1

// Record kinds. Numbers are part of the on-disk format: never renumber, never reuse.
const (
	kindAdd      = 1  // a task accepted at intake (all task fields, Ord, Added, Expires, NoResult)
	kindSend     = 2  // ID sent: Tries = the new count, Next = ack deadline
	kindRetry    = 3  // ID back to Scheduled after an ack timeout or a send error: Next, Err
	kindRequeue  = 4  // ID back to Scheduled without a failed try (device offline, restart): Tries
	kindFinish   = 5  // ID terminal: Status, Err, Done
	kindReported = 6  // IDs' results accepted upstream
	kindPurge    = 7  // IDs removed (failed, reported, past retention or purged by command)
	kindReset    = 8  // IDs (failed) scheduled again with zero tries
	kindPause    = 9  // Device paused
	kindResume   = 10 // Device resumed
	kindItem     = 11 // snapshot: one message with its whole state
	kindDevice   = 12 // snapshot: one device's persistent state (Paused)
	kindRecent   = 13 // snapshot: IDs of finished messages remembered for dedupe, oldest first
)
