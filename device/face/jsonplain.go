package face

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/seed0e69bba5/faceagent/internal/jsonplain"
)

// The JSON codec of the terminal protocol without reflection. Every command the agent sends and
// every ack and heartbeat a terminal answers passes through here, once per task; encoding/json
// cost about 1.5 µs and 3-10 allocations per message (docs/benchmarks.md, "Terminal
// protocol codecs").
//
// Encoding writes exactly json.Marshal's bytes for the three message types
// (TestAppendJSONSameAsMarshal, FuzzEncodeCommandJSON, FuzzEncodeAckHeartbeatJSON).
// Decoding reads the plain subset of JSON a terminal normally sends (internal/jsonplain) and
// leaves everything else to encoding/json (decodeJSON), so that every input gets the same
// value or the same error as before (FuzzParseJSONSameAsEncodingJSON).

// appendCommandJSON appends c as json.Marshal writes it; c must be valid.
//
//	{"messageId":S,"op":S[,"person":P][,"after":S][,"limit":N][,"face":F][,"persons":[P,…]]}
//
// with the person left out when it is the zero Person and the face when it is the zero
// FaceChunk (omitzero), where F is
//
//	{"sha256":S,"size":N,"offset":N[,"data":"<standard padded base64>"]}
func appendCommandJSON(dst []byte, c *Command) []byte {
	dst = append(dst, `{"messageId":`...)
	dst = AppendJSONString(dst, c.MessageID)
	dst = append(dst, `,"op":`...)
	dst = AppendJSONString(dst, string(c.Op))
	if c.Person != (Person{}) {
		dst = append(dst, `,"person":`...)
		dst = appendPersonJSON(dst, &c.Person)
	}
	if c.After != "" {
		dst = append(dst, `,"after":`...)
		dst = AppendJSONString(dst, c.After)
	}
	if c.Limit != 0 {
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, int64(c.Limit), 10)
	}
	if !c.Face.IsZero() {
		f := &c.Face
		dst = append(dst, `,"face":{"sha256":`...)
		dst = AppendJSONString(dst, f.SHA256)
		dst = append(dst, `,"size":`...)
		dst = strconv.AppendInt(dst, int64(f.Size), 10)
		dst = append(dst, `,"offset":`...)
		dst = strconv.AppendInt(dst, int64(f.Offset), 10)
		if len(f.Data) != 0 {
			dst = append(dst, `,"data":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, f.Data)
			dst = append(dst, '"')
		}
		dst = append(dst, '}')
	}
	if len(c.Persons) != 0 {
		dst = append(dst, `,"persons":[`...)
		for i := range c.Persons {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPersonJSON(dst, &c.Persons[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendPersonJSON appends p as json.Marshal writes it:
//
//	{"id":S[,"name":S][,"validFrom":S][,"validTo":S][,"rev":S][,"face":{"sha256":S[,"size":N][,"kind":S]}]}
func appendPersonJSON(dst []byte, p *Person) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, p.ID)
	if p.Name != "" { // omitempty
		dst = append(dst, `,"name":`...)
		dst = AppendJSONString(dst, p.Name)
	}
	if p.ValidFrom != "" {
		dst = append(dst, `,"validFrom":`...)
		dst = AppendJSONString(dst, p.ValidFrom)
	}
	if p.ValidTo != "" {
		dst = append(dst, `,"validTo":`...)
		dst = AppendJSONString(dst, p.ValidTo)
	}
	if p.Rev != "" {
		dst = append(dst, `,"rev":`...)
		dst = AppendJSONString(dst, p.Rev)
	}
	if !p.Face.IsZero() {
		dst = append(dst, `,"face":{"sha256":`...)
		dst = AppendJSONString(dst, p.Face.SHA256)
		if p.Face.Size != 0 {
			dst = append(dst, `,"size":`...)
			dst = strconv.AppendInt(dst, int64(p.Face.Size), 10)
		}
		if p.Face.Kind != "" {
			dst = append(dst, `,"kind":`...)
			dst = AppendJSONString(dst, string(p.Face.Kind))
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendAckJSON appends a as json.Marshal writes it:
//
//	{"messageId":S,"code":N,"message":S[,"persons":[{"id":S,"rev":S},…]][,"next":S][,"have":N][,"results":[{"id":S,"code":N},…]]}
//
// with persons left out when nil (omitzero) and written as [] when empty.
func appendAckJSON(dst []byte, a *Ack) []byte {
	dst = append(dst, `{"messageId":`...)
	dst = AppendJSONString(dst, a.MessageID)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(a.Code), 10)
	dst = append(dst, `,"message":`...)
	dst = AppendJSONString(dst, a.Message)
	if a.Persons != nil {
		dst = append(dst, `,"persons":[`...)
		for i := range a.Persons {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = AppendJSONString(dst, a.Persons[i].ID)
			dst = append(dst, `,"rev":`...)
			dst = AppendJSONString(dst, a.Persons[i].Rev)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if a.Next != "" {
		dst = append(dst, `,"next":`...)
		dst = AppendJSONString(dst, a.Next)
	}
	if a.Have != 0 {
		dst = append(dst, `,"have":`...)
		dst = strconv.AppendInt(dst, int64(a.Have), 10)
	}
	if len(a.Results) != 0 {
		dst = append(dst, `,"results":[`...)
		for i := range a.Results {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = AppendJSONString(dst, a.Results[i].ID)
			dst = append(dst, `,"code":`...)
			dst = strconv.AppendInt(dst, int64(a.Results[i].Code), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendHeartbeatJSON appends h as json.Marshal writes it:
//
//	{"deviceId":S,"time":S,"firmware":S,"persons":N[,"protocol":N][,"serial":S][,"digest":S][,"capacity":N][,"batch":N]}
func appendHeartbeatJSON(dst []byte, h *Heartbeat) []byte {
	dst = append(dst, `{"deviceId":`...)
	dst = AppendJSONString(dst, h.DeviceID)
	dst = append(dst, `,"time":`...)
	dst = AppendJSONString(dst, h.Time)
	dst = append(dst, `,"firmware":`...)
	dst = AppendJSONString(dst, h.Firmware)
	dst = append(dst, `,"persons":`...)
	dst = strconv.AppendInt(dst, int64(h.Persons), 10)
	if h.Protocol != 0 {
		dst = append(dst, `,"protocol":`...)
		dst = strconv.AppendInt(dst, int64(h.Protocol), 10)
	}
	if h.Serial != "" {
		dst = append(dst, `,"serial":`...)
		dst = AppendJSONString(dst, h.Serial)
	}
	if h.Digest != "" {
		dst = append(dst, `,"digest":`...)
		dst = AppendJSONString(dst, h.Digest)
	}
	if h.Capacity != 0 {
		dst = append(dst, `,"capacity":`...)
		dst = strconv.AppendInt(dst, int64(h.Capacity), 10)
	}
	if h.Batch != 0 {
		dst = append(dst, `,"batch":`...)
		dst = strconv.AppendInt(dst, int64(h.Batch), 10)
	}
	return append(dst, '}')
}

// AppendJSONString appends s quoted as encoding/json does with its default HTML escaping:
// <, > and & as \u003c…, control characters as \n, \t, … or \u00XX, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 escaped. The agent writes its own JSON reports with it.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// maxSharedText bounds the payloads whose decoded strings share one copy of the payload
// (one allocation per message instead of one per field). Above it each field gets its own
// copy, so a message padded with white space cannot keep a large buffer alive.
const maxSharedText = 1024

// The parse functions below read the plain JSON subset of the protocol's messages
// (internal/jsonplain): one object whose members are the message's fields by their exact
// names (any order, repeated ones: the last wins, as with encoding/json), white space
// anywhere JSON allows it, strings in valid UTF-8 with no escape and no control character,
// integers without fraction, exponent or leading zero that fit an int. Anything else —
// another spelling of a key, an unknown member, null, an escape, a number in another form,
// a syntax error — makes a parse function report ok false, and the caller decodes with
// encoding/json instead, which gives that input the same answer as before.

// parsePlainCommand decodes b as encoding/json would into a Command, if b is plain.
func parsePlainCommand(b []byte) (c Command, ok bool) {
	p := jsonplain.NewScanner(b, maxSharedText)
	ok = p.Object(func(key []byte) bool {
		switch string(key) { // compared without a copy
		case "messageId":
			return p.Str(&c.MessageID)
		case "op":
			return ScanPlainOp(&p, &c.Op)
		case "person":
			return ScanPlainPerson(&p, &c.Person)
		case "after":
			return p.Str(&c.After)
		case "limit":
			return p.Int(&c.Limit)
		case "face":
			return scanPlainFaceChunk(&p, &c.Face)
		case "persons":
			// A repeated "persons" makes encoding/json decode into the elements the first
			// one left (merging them); that rare shape is left to it.
			if c.Persons != nil {
				return false
			}
			return scanPlainPersons(&p, &c.Persons)
		}
		return false
	})
	if !ok || !p.End() {
		return Command{}, false
	}
	return c, true
}

// parsePlainAck decodes b as encoding/json would into an Ack, if b is plain; hasCode says
// whether "code" was present.
func parsePlainAck(b []byte) (a Ack, hasCode, ok bool) {
	p := jsonplain.NewScanner(b, maxSharedText)
	ok = p.Object(func(key []byte) bool {
		switch string(key) {
		case "messageId":
			return p.Str(&a.MessageID)
		case "code":
			hasCode = true
			return p.Int(&a.Code)
		case "message":
			return p.Str(&a.Message)
		case "persons":
			// A repeated "persons" makes encoding/json decode into the elements the first
			// one left (merging them); that rare shape is left to it.
			if a.Persons != nil {
				return false
			}
			return scanPlainPersonRevs(&p, &a.Persons)
		case "next":
			return p.Str(&a.Next)
		case "have":
			return p.Int(&a.Have)
		case "results":
			if a.Results != nil { // repeated: as "persons"
				return false
			}
			return scanPlainResults(&p, &a.Results)
		}
		return false
	})
	if !ok || !p.End() {
		return Ack{}, false, false
	}
	return a, hasCode, true
}

// parsePlainHeartbeat decodes b as encoding/json would into a Heartbeat, if b is plain.
func parsePlainHeartbeat(b []byte) (h Heartbeat, ok bool) {
	p := jsonplain.NewScanner(b, maxSharedText)
	ok = p.Object(func(key []byte) bool {
		switch string(key) {
		case "deviceId":
			return p.Str(&h.DeviceID)
		case "time":
			return p.Str(&h.Time)
		case "firmware":
			return p.Str(&h.Firmware)
		case "persons":
			return p.Int(&h.Persons)
		case "protocol":
			return p.Int(&h.Protocol)
		case "serial":
			return p.Str(&h.Serial)
		case "digest":
			return p.Str(&h.Digest)
		case "capacity":
			return p.Int(&h.Capacity)
		case "batch":
			return p.Int(&h.Batch)
		}
		return false
	})
	if !ok || !p.End() {
		return Heartbeat{}, false
	}
	return h, true
}

// ScanPlainOp reads an op string into op from the plain JSON p is at (see above); a task
// message (agent/wire) has the same member as a command.
func ScanPlainOp(p *jsonplain.Scanner, op *Op) bool {
	var s string
	ok := p.Str(&s)
	*op = Op(s)
	return ok
}

// ScanPlainPerson reads a person object into pr from the plain JSON p is at: into the same
// Person, so a repeated "person" member merges, as with encoding/json. Task messages
// (agent/wire) carry the same object as commands.
func ScanPlainPerson(p *jsonplain.Scanner, pr *Person) bool {
	return p.Object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return p.Str(&pr.ID)
		case "name":
			return p.Str(&pr.Name)
		case "validFrom":
			return p.Str(&pr.ValidFrom)
		case "validTo":
			return p.Str(&pr.ValidTo)
		case "rev":
			return p.Str(&pr.Rev)
		case "face":
			return p.Object(func(key []byte) bool {
				switch string(key) {
				case "sha256":
					return p.Str(&pr.Face.SHA256)
				case "size":
					return p.Int(&pr.Face.Size)
				case "kind":
					var kind string
					ok := p.Str(&kind)
					pr.Face.Kind = FaceKind(kind)
					return ok
				}
				return false
			})
		}
		return false
	})
}

// scanPlainFaceChunk reads PutFace's face object into f from the plain JSON p is at, data
// decoded from standard padded base64 as encoding/json decodes a []byte. Data that is not
// such base64 is left to encoding/json, which says why.
func scanPlainFaceChunk(p *jsonplain.Scanner, f *FaceChunk) bool {
	return p.Object(func(key []byte) bool {
		switch string(key) {
		case "sha256":
			return p.Str(&f.SHA256)
		case "size":
			return p.Int(&f.Size)
		case "offset":
			return p.Int(&f.Offset)
		case "data":
			raw, ok := p.Raw()
			if !ok || base64.StdEncoding.DecodedLen(len(raw)) > MaxChunkSize+2 {
				return false // over the bound: encoding/json decodes it, Validate refuses it
			}
			data := make([]byte, base64.StdEncoding.DecodedLen(len(raw)))
			n, err := base64.StdEncoding.Decode(data, raw)
			if err != nil {
				return false
			}
			f.Data = data[:n]
			return true
		}
		return false
	})
}

// scanPlainPersons reads AddPersons' persons, an array of person objects, into a new
// slice (empty, not nil, for []), as encoding/json does into a nil slice. It gives up past
// MaxBatch entries: Validate refuses such a batch, and encoding/json finds the same.
func scanPlainPersons(p *jsonplain.Scanner, dst *[]Person) bool {
	out := []Person{}
	ok := scanPlainArray(p, MaxBatch, func() bool {
		out = append(out, Person{})
		return ScanPlainPerson(p, &out[len(out)-1])
	})
	if ok {
		*dst = out
	}
	return ok
}

// scanPlainResults reads an AddPersons ack's results, an array of {"id","code"} objects,
// as scanPlainPersons reads persons.
func scanPlainResults(p *jsonplain.Scanner, dst *[]Result) bool {
	out := []Result{}
	ok := scanPlainArray(p, MaxBatch, func() bool {
		var r Result
		ok := p.Object(func(key []byte) bool {
			switch string(key) {
			case "id":
				return p.Str(&r.ID)
			case "code":
				return p.Int(&r.Code)
			}
			return false
		})
		out = append(out, r)
		return ok
	})
	if ok {
		*dst = out
	}
	return ok
}

// scanPlainArray reads a JSON array from p, calling elem at each element; false on
// anything but a plain array of at most limit elements elem accepts.
func scanPlainArray(p *jsonplain.Scanner, limit int, elem func() bool) bool {
	p.Space()
	if !p.Byte('[') {
		return false
	}
	p.Space()
	if p.Byte(']') {
		return true
	}
	for n := 0; n < limit; n++ {
		if !elem() {
			return false
		}
		p.Space()
		if p.Byte(']') {
			return true
		}
		if !p.Byte(',') {
			return false
		}
		p.Space()
	}
	return false
}

// scanPlainPersonRevs reads a ListPersons page, an array of {"id","rev"} objects, into a
// new slice (empty, not nil, for []), as encoding/json does into a nil slice. It gives up
// past MaxListLimit entries: Validate refuses such a page, and encoding/json finds the
// same.
func scanPlainPersonRevs(p *jsonplain.Scanner, dst *[]PersonRev) bool {
	p.Space()
	if !p.Byte('[') {
		return false
	}
	out := []PersonRev{}
	p.Space()
	if p.Byte(']') {
		*dst = out
		return true
	}
	for len(out) <= MaxListLimit {
		var e PersonRev
		ok := p.Object(func(key []byte) bool {
			switch string(key) {
			case "id":
				return p.Str(&e.ID)
			case "rev":
				return p.Str(&e.Rev)
			}
			return false
		})
		if !ok {
			return false
		}
		out = append(out, e)
		p.Space()
		if p.Byte(']') {
			*dst = out
			return true
		}
		if !p.Byte(',') {
			return false
		}
		p.Space()
	}
	return false
}
