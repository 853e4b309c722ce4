package statestore

//go:generate go run github.com/tinylib/msgp -file=record.go -o=record_gen.go -tests=false -io=false -unexported

// snapshotHeader is the first record of a snapshot file.
type snapshotHeader struct {
	Format    uint32 `msg:"format"`  // snapshotFormat
	Node      string `msg:"node"`    // the node id of the store that wrote it
	Count     uint32 `msg:"count"`   // number of key records that follow
	WrittenAt int64  `msg:"written"` // Unix ms, for operators
}

// keyRecord is one persisted key (written with "aio-persistence: true").
type keyRecord struct {
	Key          []byte `msg:"k"`
	Value        []byte `msg:"v"`
	Wall         int64  `msg:"w"` // version
	Counter      uint32 `msg:"c"`
	Node         string `msg:"n"`
	ExpireAt     int64  `msg:"x"` // Unix ms; 0: never
	Fenced       bool   `msg:"f"`
	FenceWall    int64  `msg:"fw"`
	FenceCounter uint32 `msg:"fc"`
	FenceNode    string `msg:"fn"`
}
