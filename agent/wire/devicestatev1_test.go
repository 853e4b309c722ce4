package wire

// deviceStateV1 is DeviceState as the first releases wrote and read it, before the sync
// fields: its decoder in devicestatev1_gen_test.go stands for the readers already
// deployed, which must still decode what the agent writes now. The decoder is frozen, as
// those readers are; it was made by msgp from this type (msgp reads no _test.go file, so
// from a copy named devicestatev1.go):
//
//	go run github.com/tinylib/msgp -file=devicestatev1.go -o=devicestatev1_gen_test.go -tests=false -io=false -unexported
type deviceStateV1 struct {
	DeviceID      string `msg:"deviceId"`
	Online        bool   `msg:"online"`
	LastHeartbeat int64  `msg:"lastHeartbeat"`
	LastAck       int64  `msg:"lastAck"`
	Firmware      string `msg:"firmware"`
	Persons       int    `msg:"persons"`
	Paused        bool   `msg:"paused"`
	QueueDepth    int    `msg:"queueDepth"`
	InFlight      string `msg:"inFlight"`
	Sent          uint64 `msg:"sent"`
	Succeeded     uint64 `msg:"succeeded"`
	Failed        uint64 `msg:"failed"`
	Retries       uint64 `msg:"retries"`
	LastError     string `msg:"lastError"`
	UpdatedAt     int64  `msg:"updatedAt"`
}
