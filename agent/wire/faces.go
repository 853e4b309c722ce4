package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/jsonplain"
)

// Face kinds a task's face may name ("kind" is informative; absent is fine).
const (
	FaceTemplate = "template"
	FacePhoto    = "photo"
)

// Face is the face a task's person carries:
//
//	"face":{"sha256":"<64 hex>","kind":"template"|"photo","size":N,"data":"<base64>"}
//
// Data is the decoded face, nil when the task left "data" out (the gateway must hold the
// face already: the intake checks). Size is "size" as the task states it (0: absent); with
// data, a stated size must match it. Parse decodes the base64 once, into Data, and
// Validate checks that it hashes to SHA256.
type Face struct {
	SHA256 string
	Kind   string
	Size   int64
	Data   []byte
	// problem is what was wrong with "data" as read (not base64, not a string), for
	// Validate to report with the person's name.
	problem string
}

// Len is the face's size: the data's length, or the stated size without data.
func (f *Face) Len() int64 {
	if f.Data != nil {
		return int64(len(f.Data))
	}
	return f.Size
}

// Ref is the face as a terminal command and a desired record carry it: its sha256, its
// size (Len: 0 when neither data nor a size came) and its kind.
func (f *Face) Ref() face.FaceRef {
	return face.FaceRef{SHA256: f.SHA256, Size: int(f.Len()), Kind: face.FaceKind(f.Kind)}
}

// PersonFace is a Face and the person carrying it: 0 for an AddPerson's person, the
// index in Persons for a SetWhitelist's.
type PersonFace struct {
	Person int
	Face
}

// faceOut is a Face as MarshalJSON writes it.
type faceOut struct {
	SHA256 string `json:"sha256"`
	Kind   string `json:"kind,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Data   []byte `json:"data,omitempty"`
}

// faceIn is a Face as encoding/json reads it; faceData reads "data".
type faceIn struct {
	SHA256 string   `json:"sha256"`
	Kind   string   `json:"kind"`
	Size   int64    `json:"size"`
	Data   faceData `json:"data"`
}

type faceData struct {
	b       []byte
	problem string
}

// UnmarshalJSON decodes the base64 straight from the message (a string with escapes is
// unquoted first). It never fails: what is wrong is kept for Validate, whose reason names
// the person.
func (d *faceData) UnmarshalJSON(raw []byte) error {
	d.b, d.problem = nil, ""
	switch {
	case string(raw) == "null":
		return nil
	case len(raw) < 2 || raw[0] != '"':
		d.problem = "want a base64 string"
		return nil
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		d.b, d.problem = decodeEscapedFaceData(s)
		return nil
	}
	d.b, d.problem = decodeFaceData(s)
	return nil
}

// decodeFaceData decodes standard padded base64 into one buffer of its decoded length.
func decodeFaceData(s []byte) ([]byte, string) {
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		return nil, "not standard base64 (RFC 4648, padded): " + err.Error()
	}
	return b[:n], ""
}

// decodeEscapedFaceData is decodeFaceData for a JSON string with escapes (a back office
// that writes "/" as "\/"): unescaped through a small buffer, a chunk at a time, into the
// one output buffer, so the data is not copied whole before it is decoded. Line breaks
// are skipped as base64.StdEncoding skips them; an escape of anything but ASCII is not
// base64.
func decodeEscapedFaceData(s []byte) ([]byte, string) {
	dst := make([]byte, base64.StdEncoding.DecodedLen(len(s))) // unescaped is no longer than s
	var chunk [1024]byte                                       // a multiple of 4: no padding inside
	n, out, in := 0, 0, 0                                      // chunk fill, bytes decoded, chars before chunk
	flush := func() string {
		m, err := base64.StdEncoding.Decode(dst[out:], chunk[:n])
		if err != nil {
			if ce, ok := err.(base64.CorruptInputError); ok {
				err = base64.CorruptInputError(int64(ce) + int64(in))
			}
			return "not standard base64 (RFC 4648, padded): " + err.Error()
		}
		out += m
		in += n
		n = 0
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			i++
			if i >= len(s) {
				return nil, "want a base64 string"
			}
			switch s[i] {
			case '/', '\\', '"':
				c = s[i]
			case 'n', 'r':
				continue
			case 'u':
				v, err := strconv.ParseUint(string(s[i+1:min(i+5, len(s))]), 16, 16)
				if err != nil || i+5 > len(s) || v >= utf8RuneSelf {
					return nil, "not standard base64 (RFC 4648, padded): an escape that is no base64 character"
				}
				i += 4
				c = byte(v)
				if c == '\n' || c == '\r' {
					continue
				}
			default:
				return nil, "not standard base64 (RFC 4648, padded): an escape that is no base64 character"
			}
		}
		chunk[n] = c
		n++
		if n == len(chunk) {
			if p := flush(); p != "" {
				return nil, p
			}
		}
	}
	if p := flush(); p != "" {
		return nil, p
	}
	return dst[:out], ""
}

const utf8RuneSelf = 0x80

func (f *faceIn) face() Face {
	return Face{SHA256: f.SHA256, Kind: f.Kind, Size: f.Size, Data: f.Data.b, problem: f.Data.problem}
}

// personFacesIn reads only the faces of a task object, as encoding/json reads the
// persons into Task (the same keys, merging and order).
type personFacesIn struct {
	Person struct {
		Face *faceIn `json:"face"`
	} `json:"person"`
	Persons []struct {
		Face *faceIn `json:"face"`
	} `json:"persons"`
}

// taskFields is Task without its methods, for decoding it with encoding/json.
type taskFields Task

// UnmarshalJSON decodes a task as encoding/json decodes its fields, then, when the
// object may carry a face, its persons' faces into Faces.
func (t *Task) UnmarshalJSON(raw []byte) error {
	if err := json.Unmarshal(raw, (*taskFields)(t)); err != nil {
		return err
	}
	// face.Person reads "face" as a FaceRef; a task's faces are Faces (with their data),
	// and the persons carry none, as the plain path reads them.
	t.Person.Face = face.FaceRef{}
	for i := range t.Persons {
		t.Persons[i].Face = face.FaceRef{}
	}
	t.Faces = nil
	if !mayNameFace(raw) {
		return nil
	}
	var in personFacesIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return err
	}
	if f := in.Person.Face; f != nil {
		t.Faces = append(t.Faces, PersonFace{Person: 0, Face: f.face()})
	}
	for i := range in.Persons {
		if f := in.Persons[i].Face; f != nil {
			t.Faces = append(t.Faces, PersonFace{Person: i, Face: f.face()})
		}
	}
	if t.Op == face.DeletePerson {
		t.Faces = nil
	}
	return nil
}

// mayNameFace reports whether raw may hold a "face" member: "face" in any case
// (encoding/json matches keys so), or an escape that could spell it.
func mayNameFace(raw []byte) bool {
	for i := 0; i+4 <= len(raw); i++ {
		switch raw[i] {
		case '\\':
			return true
		case 'f', 'F':
			if (raw[i+1]|0x20) == 'a' && (raw[i+2]|0x20) == 'c' && (raw[i+3]|0x20) == 'e' {
				return true
			}
		}
	}
	return false
}

// checkFaces checks the task's faces: each belongs to a person of the task, once; its
// sha256 is 64 lower-case hex digits; its kind is known; its data, when present, is
// base64 of the stated size that hashes to the sha256. Errors name the person and field.
func (t *Task) checkFaces() error {
	n := 0
	switch t.Op {
	case face.AddPerson:
		n = 1
	case SetWhitelist:
		n = len(t.Persons)
	}
	if len(t.Faces) > 0 && n == 0 {
		return fmt.Errorf("person.face: %s carries no face", t.Op)
	}
	last := -1
	for i := range t.Faces {
		f := &t.Faces[i]
		where := "person.face"
		if t.Op == SetWhitelist {
			where = "persons[" + strconv.Itoa(f.Person) + "]"
			if f.Person >= 0 && f.Person < n {
				if id := t.Persons[f.Person].ID; len(id) <= MaxPersonIDLen {
					where += fmt.Sprintf(" (id %q)", id)
				}
			}
			where += ": face"
		}
		if f.Person <= last || f.Person >= n {
			return fmt.Errorf("%s: no such person, or a second face", where)
		}
		last = f.Person
		if err := checkFace(where, &f.Face); err != nil {
			return err
		}
	}
	return nil
}

func checkFace(where string, f *Face) error {
	if !isSHA256Hex(f.SHA256) {
		if f.SHA256 == "" {
			return fmt.Errorf("%s.sha256: missing", where)
		}
		return fmt.Errorf("%s.sha256: %.80q is not 64 lower-case hex digits", where, f.SHA256)
	}
	switch f.Kind {
	case "", FaceTemplate, FacePhoto:
	default:
		return fmt.Errorf("%s.kind: %.64q is neither %q nor %q", where, f.Kind, FaceTemplate, FacePhoto)
	}
	if f.Size < 0 {
		return fmt.Errorf("%s.size: %d is negative", where, f.Size)
	}
	if f.problem != "" {
		return fmt.Errorf("%s.data: %s", where, f.problem)
	}
	if f.Data == nil {
		return nil
	}
	if len(f.Data) == 0 {
		return fmt.Errorf("%s.data: empty", where)
	}
	if f.Size != 0 && f.Size != int64(len(f.Data)) {
		return fmt.Errorf("%s.size: %d, but data holds %d bytes", where, f.Size, len(f.Data))
	}
	sum := sha256.Sum256(f.Data)
	var want [sha256.Size]byte
	_, _ = hex.Decode(want[:], []byte(f.SHA256))
	if sum != want {
		return fmt.Errorf("%s.data: hashes to %s, not to sha256 %s", where, hex.EncodeToString(sum[:]), f.SHA256)
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// plainPerson reads a person object into pr, as face.ScanPlainPerson does, and its
// "face" member into *fc (a second face for the same person is left to encoding/json).
func plainPerson(p *jsonplain.Scanner, pr *face.Person, fc **Face) bool {
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
			if *fc != nil {
				return false
			}
			*fc = new(Face)
			return plainFace(p, *fc)
		}
		return false
	})
}

// plainFace reads a face object; its data is decoded straight from the message.
func plainFace(p *jsonplain.Scanner, f *Face) bool {
	seen := 0
	return p.Object(func(key []byte) bool {
		bit := 0
		switch string(key) {
		case "sha256":
			bit = 1
		case "kind":
			bit = 2
		case "size":
			bit = 4
		case "data":
			bit = 8
		default:
			return false
		}
		if seen&bit != 0 { // a repeated member: left to encoding/json
			return false
		}
		seen |= bit
		switch bit {
		case 1:
			return p.Str(&f.SHA256)
		case 2:
			return p.Str(&f.Kind)
		case 4:
			n, ok := p.Int64()
			f.Size = n
			return ok
		}
		raw, ok := p.Raw()
		if !ok {
			return false
		}
		f.Data, f.problem = decodeFaceData(raw)
		return true
	})
}
