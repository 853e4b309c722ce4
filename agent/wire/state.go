package wire

//go:generate go run github.com/tinylib/msgp -file=state.go -o=state_gen.go -tests=false -io=false

// DeviceState is a terminal's state as the agent writes it to the state store under
// faceagent/{gw}/devices/{id}, encoded with msgp (docs/design.md "State store keys"). Times
// are Unix milliseconds (0: never). Field names are the msgp map keys: tools decode them
// by name, so rename nothing and remove nothing.
type DeviceState struct {
	DeviceID      string `msg:"deviceId"`
	Online        bool   `msg:"online"`
	LastHeartbeat int64  `msg:"lastHeartbeat"`
	LastAck       int64  `msg:"lastAck"`
	Firmware      string `msg:"firmware"`
	Persons       int    `msg:"persons"`
	Paused        bool   `msg:"paused"`
	QueueDepth    int    `msg:"queueDepth"`
	InFlight      string `msg:"inFlight"` // message id, "" when none
	Sent          uint64 `msg:"sent"`
	Succeeded     uint64 `msg:"succeeded"`
	Failed        uint64 `msg:"failed"`
	Retries       uint64 `msg:"retries"`
	LastError     string `msg:"lastError"`
	UpdatedAt     int64  `msg:"updatedAt"`

	// Whitelist sync. Fields are only ever added: a reader skips the keys it does not
	// know and leaves a field whose key is absent at its zero value, so older readers
	// decode newer records and the other way round (TestDeviceStateOldAndNewReaders).
	DesiredPersons int    `msg:"desiredPersons"` // persons on the terminal's desired whitelist
	InSync         bool   `msg:"inSync"`         // the last heartbeat's digest is the desired list's, nothing queued or in flight
	LastSync       int64  `msg:"lastSync"`       // when the last reconciliation started or ended (0: never)
	SyncStatus     string `msg:"syncStatus"`     // that reconciliation's SyncStatus ("" before the first; "unmanaged": no desired list, not reconciled)
}
