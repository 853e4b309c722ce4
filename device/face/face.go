package face

import (
	"bytes"
	"slices"
)

//go:generate go run github.com/tinylib/msgp -file=face.go -o=face_gen.go -tests=false -io=false

// Person's msgp encoding is written by hand (personmsg.go): it leaves fields out by rule,
// which tags cannot say. Its decoding is generated.
//msgp:marshal ignore Person
//msgp:size ignore Person

// Op is the operation a command asks of a terminal.
type Op string

// The operations. Anything else is refused by Validate (ErrUnknownOp).
const (
	AddPerson    Op = "AddPerson"    // add or replace the person on the whitelist
	DeletePerson Op = "DeletePerson" // remove the person; deleting an absent person succeeds
	// ListPersons (protocol v2) asks for one page of the terminal's persons with their
	// revs: those whose id sorts after Command.After (bytewise), in id order, at most
	// Command.PageSize() of them.
	ListPersons Op = "ListPersons"
	// PutFace (protocol v2) carries one chunk of a face (Command.Face): the bytes from
	// FaceChunk.Offset on. The ack says in Ack.Have how many bytes of that face the terminal
	// holds from 0 without a gap; the next chunk starts there.
	PutFace Op = "PutFace"
	// AddPersons (protocol v2) adds or replaces every person of Command.Persons, in order,
	// as that many AddPersons would; the ack carries one Result per person. A terminal
	// takes batches only when its heartbeat says Batch > 0, of at most that many persons.
	AddPersons Op = "AddPersons"
)

// Ack codes protocol v2 gives a meaning; 0 is success, and any other non-zero code is a
// refusal as in v1.
const (
	// CodeFaceMissing: the person's face is not on the terminal (send it with PutFace,
	// then the person again).
	CodeFaceMissing = 21
	// CodeFaceHash: a face's bytes do not hash to its sha256, or a chunk ran past its
	// size; the terminal discarded what it held of it (Have 0).
	CodeFaceHash = 22
	// CodeCapacity: the terminal is full; the new person was not added.
	CodeCapacity = 23
)

// FaceKind says what a face's bytes are. It is informative: the terminal knows its own
// formats.
type FaceKind string

// The kinds of face a person may carry (or none: the empty FaceKind).
const (
	FaceTemplate FaceKind = "template" // a feature template for the terminal's matcher
	FacePhoto    FaceKind = "photo"    // an image the terminal extracts its template from
)

// FaceRef is the face a person carries (protocol v2): the SHA-256 of the face's bytes in
// lower-case hex, which is how the terminal finds the face it was sent with PutFace, the
// size in bytes (0: not said) and the kind (empty: not said). The face's hash is part of
// the person's Rev.
type FaceRef struct {
	SHA256 string   `json:"sha256" msg:"sha256"`
	Size   int      `json:"size,omitempty" msg:"size,omitempty"`
	Kind   FaceKind `json:"kind,omitempty" msg:"kind,omitempty"`
}

// IsZero reports whether f is no face: a person without one leaves "face" out.
func (f FaceRef) IsZero() bool { return f == FaceRef{} }

// FaceChunk is PutFace's payload: the face with hash SHA256 and Size bytes in all, and
// Data, its bytes from Offset on (empty: a probe, answered with what the terminal holds).
// Data is standard padded base64 in JSON and raw bytes (msgp bin) in serial frames.
type FaceChunk struct {
	SHA256 string `json:"sha256" msg:"sha256"`
	Size   int    `json:"size" msg:"size"`
	Offset int    `json:"offset" msg:"offset"`
	Data   []byte `json:"data,omitempty" msg:"data,omitempty,limit=65536"` // limit: MaxChunkSize
}

// IsZero reports whether c is no chunk: a command other than PutFace leaves "face" out.
func (c FaceChunk) IsZero() bool {
	return c.SHA256 == "" && c.Size == 0 && c.Offset == 0 && len(c.Data) == 0
}

// Person is one whitelist entry. ValidFrom and ValidTo are RFC 3339 texts (empty: no
// bound); they are kept as text so that what the back office wrote reaches the terminal
// byte for byte.
//
// The fields protocol v2 adds are left out of both encodings when empty, so a v1 person
// keeps its bytes.
type Person struct {
	ID        string `json:"id" msg:"id"`
	Name      string `json:"name,omitempty" msg:"name"`
	ValidFrom string `json:"validFrom,omitempty" msg:"validFrom"`
	ValidTo   string `json:"validTo,omitempty" msg:"validTo"`
	// Rev (protocol v2) is the agent's revision of the record, RecordRev's wire form (16
	// lower-case hex digits). A v2 terminal stores it with the person and lists it; it
	// never computes one.
	Rev string `json:"rev,omitempty" msg:"rev,omitempty"`
	// Face (protocol v2) is the person's face, which the terminal must hold (PutFace)
	// before it takes the person; left out of both encodings when zero.
	Face FaceRef `json:"face,omitzero" msg:"face,omitzero"`
}

// IsZero reports whether p is the zero Person: a command carrying none leaves "person" out
// (omitzero in both encodings).
func (p Person) IsZero() bool { return p == Person{} }

// Command is sent to a terminal on dev/face/{id} (MQTT) or in a KindCommand frame (serial).
// A resend keeps the MessageID and the terminal must ack it again (docs/protocol.md "Message
// ids and duplicates").
//
// AddPerson and DeletePerson carry Person; ListPersons carries After and Limit and no
// person (a zero Person is left out of both encodings); PutFace carries Face; AddPersons
// carries Persons. Every field but messageId and op is left out of both encodings when
// empty. A terminal tells the agent's resend of the command in flight with Equal.
type Command struct {
	MessageID string `json:"messageId" msg:"messageId"`
	Op        Op     `json:"op" msg:"op"`
	Person    Person `json:"person,omitzero" msg:"person,omitzero"`
	// After is ListPersons' start: the page holds ids greater than After, bytewise; empty
	// for the first page.
	After string `json:"after,omitempty" msg:"after,omitempty"`
	// Limit is ListPersons' page size, at most MaxListLimit; 0 means DefaultListLimit.
	Limit int `json:"limit,omitempty" msg:"limit,omitempty"`
	// Face is PutFace's chunk.
	Face FaceChunk `json:"face,omitzero" msg:"face,omitzero"`
	// Persons is AddPersons' batch: 1 to MaxBatch persons, each as AddPerson's person.
	Persons []Person `json:"persons,omitempty" msg:"persons,omitempty,limit=1000"` // limit: MaxBatch
}

// Equal reports whether c and o are the same command, field by field (nil and empty
// Data or Persons alike): how a terminal tells a resend of the command in flight.
func (c *Command) Equal(o *Command) bool {
	return c.MessageID == o.MessageID && c.Op == o.Op && c.Person == o.Person &&
		c.After == o.After && c.Limit == o.Limit &&
		c.Face.SHA256 == o.Face.SHA256 && c.Face.Size == o.Face.Size && c.Face.Offset == o.Face.Offset &&
		bytes.Equal(c.Face.Data, o.Face.Data) && slices.Equal(c.Persons, o.Persons)
}

// Ack is a terminal's answer to a command. Code 0 is success; any other code is a refusal
// (permanent: the command is not retried).
//
// An ack of ListPersons (protocol v2) also carries the page: Persons in increasing id
// order, and Next, the id to ask the next page after ("" when the list ended). Persons is
// left out of both encodings when nil, so a v1 ack keeps its bytes; an empty page may be
// nil or empty. An ack of PutFace carries Have; an ack of AddPersons carries Results.
type Ack struct {
	MessageID string      `json:"messageId" msg:"messageId"`
	Code      int         `json:"code" msg:"code"`
	Message   string      `json:"message" msg:"message"`
	Persons   []PersonRev `json:"persons,omitzero" msg:"persons,omitempty,limit=1000"` // limit: MaxListLimit
	Next      string      `json:"next,omitempty" msg:"next,omitempty"`
	// Have (PutFace) is how many bytes of the face the terminal holds from 0 without a
	// gap; the next chunk starts there. Left out when 0: absent means 0.
	Have int `json:"have,omitempty" msg:"have,omitempty"`
	// Results (AddPersons) holds one code per person of the batch, in the batch's order.
	// The ack's own Code is 0 when the batch was processed, whatever the persons' codes.
	Results []Result `json:"results,omitempty" msg:"results,omitempty,limit=1000"` // limit: MaxBatch
}

// Result is what a terminal did with one person of an AddPersons batch: Code 0 added or
// replaced, CodeFaceMissing, CodeCapacity, or another refusal.
type Result struct {
	ID   string `json:"id" msg:"id"`
	Code int    `json:"code" msg:"code"`
}

// PersonRev is one entry of a ListPersons page: a person's id and the rev the terminal
// stored with it.
type PersonRev struct {
	ID  string `json:"id" msg:"id"`
	Rev string `json:"rev" msg:"rev"`
}

// OK reports whether the terminal accepted the command.
func (a Ack) OK() bool { return a.Code == 0 }

// Heartbeat is a terminal's periodic sign of life. Persons is the size of its whitelist.
//
// A v2 terminal adds Protocol (2), Serial, Digest, Capacity and Batch; each is left out of
// both encodings when zero, so a heartbeat without Protocol is v1's, byte for byte.
type Heartbeat struct {
	DeviceID string `json:"deviceId" msg:"deviceId"`
	Time     string `json:"time" msg:"time"` // RFC 3339, the terminal's clock
	Firmware string `json:"firmware" msg:"firmware"`
	Persons  int    `json:"persons" msg:"persons"`
	// Protocol is the protocol version the terminal speaks: absent (0) or 1 for v1, 2 for
	// v2. The agent uses a v2 feature only with a terminal that says 2 or more.
	Protocol int `json:"protocol,omitempty" msg:"protocol,omitempty"`
	// Serial is the terminal's hardware serial number; a change means it was replaced.
	Serial string `json:"serial,omitempty" msg:"serial,omitempty"`
	// Digest is the Digest of the persons the terminal holds, in its wire form; required
	// when Protocol >= 2.
	Digest string `json:"digest,omitempty" msg:"digest,omitempty"`
	// Capacity is the most persons the terminal can hold (0: not said).
	Capacity int `json:"capacity,omitempty" msg:"capacity,omitempty"`
	// Batch is the most persons one AddPersons may carry (0: no batches).
	Batch int `json:"batch,omitempty" msg:"batch,omitempty"`
}

// BatchSize is the most persons an AddPersons to this terminal may carry: Batch, at most
// MaxBatch; 0 when the terminal takes no batches.
func (h *Heartbeat) BatchSize() int { return min(h.Batch, MaxBatch) }

// Version is the protocol version h announces: 1 when it says none.
func (h *Heartbeat) Version() int {
	if h.Protocol < 1 {
		return 1
	}
	return h.Protocol
}
