package face

//go:generate go run github.com/tinylib/msgp -file=face.go -o=face_gen.go -tests=false

// Op is the operation a command asks of a terminal.
type Op string

// The operations of protocol v1. Anything else is refused by Validate.
const (
	AddPerson    Op = "AddPerson"    // add or replace the person on the whitelist
	DeletePerson Op = "DeletePerson" // remove the person; deleting an absent person succeeds
)

// Person is one whitelist entry. ValidFrom and ValidTo are RFC 3339 texts (empty: no
// bound); they are kept as text so that what the back office wrote reaches the terminal
// byte for byte.
type Person struct {
	ID        string `json:"id" msg:"id"`
	Name      string `json:"name,omitempty" msg:"name"`
	ValidFrom string `json:"validFrom,omitempty" msg:"validFrom"`
	ValidTo   string `json:"validTo,omitempty" msg:"validTo"`
}

// Command is sent to a terminal on dev/face/{id} (MQTT) or in a KindCommand frame (serial).
// A resend keeps the MessageID and the terminal must ack it again (docs/protocol.md "Message
// ids and duplicates").
type Command struct {
	MessageID string `json:"messageId" msg:"messageId"`
	Op        Op     `json:"op" msg:"op"`
	Person    Person `json:"person" msg:"person"`
}

// Ack is a terminal's answer to a command. Code 0 is success; any other code is a refusal
// (permanent: the command is not retried).
type Ack struct {
	MessageID string `json:"messageId" msg:"messageId"`
	Code      int    `json:"code" msg:"code"`
	Message   string `json:"message" msg:"message"`
}

// OK reports whether the terminal accepted the command.
func (a Ack) OK() bool { return a.Code == 0 }

// Heartbeat is a terminal's periodic sign of life. Persons is the size of its whitelist.
type Heartbeat struct {
	DeviceID string `json:"deviceId" msg:"deviceId"`
	Time     string `json:"time" msg:"time"` // RFC 3339, the terminal's clock
	Firmware string `json:"firmware" msg:"firmware"`
	Persons  int    `json:"persons" msg:"persons"`
}
