package ui

// State is what the page shows: the JSON of /api/state and of each "state" event on
// /api/events. Times are Unix milliseconds (0: never). The root builds it (Options.State)
// from what the agent keeps: the outbox's device status, the device state, the failed
// commands held, the deadletter log and the health checks.
type State struct {
	Gateway string `json:"gateway"`
	Version string `json:"version"`
	At      int64  `json:"at"`
	// Actions is false when no credentials could act (no token file, no users): the page
	// then says that it is read-only.
	Actions   bool       `json:"actions"`
	Health    Health     `json:"health"`
	Terminals []Terminal `json:"terminals"`
	// Failures are the most recent failed commands held for retry; FailuresHeld counts
	// them all.
	Failures     []Failure `json:"failures"`
	FailuresHeld int       `json:"failuresHeld"`
	// DeadLetters are the most recent tasks refused at intake since the agent started
	// (UI.DeadLettered), newest first; DeadLettersPending are those not yet accepted
	// upstream.
	DeadLetters        []DeadLetter `json:"deadLetters"`
	DeadLettersPending int          `json:"deadLettersPending"`
}

// Health is what /healthz says, and the journals' sizes.
type Health struct {
	OK bool `json:"ok"`
	// Problem is why the agent is unhealthy ("" when OK).
	Problem  string    `json:"problem,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
	Upstream string    `json:"upstream"` // "embedded", "connected", "disconnected"
	Journals []Journal `json:"journals,omitempty"`
}

// Journal is one journal's size on disk.
type Journal struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Terminal is one terminal's state.
type Terminal struct {
	ID            string `json:"id"`
	Online        bool   `json:"online"`
	Paused        bool   `json:"paused"`
	Queued        int    `json:"queued"`
	InFlight      string `json:"inFlight,omitempty"`
	InFlightTries int    `json:"inFlightTries,omitempty"`
	FailedHeld    int    `json:"failedHeld"`
	// Persons is what the terminal's last heartbeat said it holds; Desired what it should.
	Persons    int    `json:"persons"`
	Desired    int    `json:"desired"`
	InSync     bool   `json:"inSync"`
	SyncStatus string `json:"syncStatus,omitempty"`
	LastSync   int64  `json:"lastSync"`
	LastError  string `json:"lastError,omitempty"`
	Firmware   string `json:"firmware,omitempty"`
	// LastHeartbeat and LastAck are when the terminal was last heard from.
	LastHeartbeat int64 `json:"lastHeartbeat"`
	LastAck       int64 `json:"lastAck"`
	// OnlineUntil is when an online terminal goes offline unless heard from again (0:
	// offline, or it needs no heartbeats). The page's state is sent again then.
	OnlineUntil  int64  `json:"onlineUntil"`
	BreakerUntil int64  `json:"breakerUntil,omitempty"`
	Sent         uint64 `json:"sent"`
	Succeeded    uint64 `json:"succeeded"`
	Failed       uint64 `json:"failed"`
}

// Failure is a failed command held for retry.
type Failure struct {
	Device    string `json:"device"`
	TaskID    string `json:"taskId"`
	MessageID string `json:"messageId"`
	Tries     int    `json:"tries"`
	Error     string `json:"error"`
	At        int64  `json:"at"`
}

// DeadLetter is a task refused at intake, with the reason.
type DeadLetter struct {
	At     int64  `json:"at"`
	Reason string `json:"reason"`
	// Payload is the start of the task as received (at most MaxDeadLetterPayload bytes).
	Payload string `json:"payload"`
}
