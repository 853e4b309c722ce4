package face

//go:generate go run github.com/tinylib/msgp -file=face.go -o=face_gen.go -tests=false

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
)

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
}

// IsZero reports whether p is the zero Person: a command carrying none leaves "person" out
// (omitzero in both encodings).
func (p Person) IsZero() bool { return p == Person{} }

// Command is sent to a terminal on dev/face/{id} (MQTT) or in a KindCommand frame (serial).
// A resend keeps the MessageID and the terminal must ack it again (docs/protocol.md "Message
// ids and duplicates").
//
// AddPerson and DeletePerson carry Person; ListPersons carries After and Limit and no
// person (a zero Person is left out of both encodings). Command stays comparable with ==:
// a terminal tells the agent's resend of the command in flight by comparing.
type Command struct {
	MessageID string `json:"messageId" msg:"messageId"`
	Op        Op     `json:"op" msg:"op"`
	Person    Person `json:"person,omitzero" msg:"person,omitzero"`
	// After is ListPersons' start: the page holds ids greater than After, bytewise; empty
	// for the first page.
	After string `json:"after,omitempty" msg:"after,omitempty"`
	// Limit is ListPersons' page size, at most MaxListLimit; 0 means DefaultListLimit.
	Limit int `json:"limit,omitempty" msg:"limit,omitempty"`
}

// Ack is a terminal's answer to a command. Code 0 is success; any other code is a refusal
// (permanent: the command is not retried).
//
// An ack of ListPersons (protocol v2) also carries the page: Persons in increasing id
// order, and Next, the id to ask the next page after ("" when the list ended). Persons is
// left out of both encodings when nil, so a v1 ack keeps its bytes; an empty page may be
// nil or empty.
type Ack struct {
	MessageID string      `json:"messageId" msg:"messageId"`
	Code      int         `json:"code" msg:"code"`
	Message   string      `json:"message" msg:"message"`
	Persons   []PersonRev `json:"persons,omitzero" msg:"persons,omitempty,limit=1000"` // limit: MaxListLimit
	Next      string      `json:"next,omitempty" msg:"next,omitempty"`
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

// Version is the protocol version h announces: 1 when it says none.
func (h *Heartbeat) Version() int {
	if h.Protocol < 1 {
		return 1
	}
	return h.Protocol
}
