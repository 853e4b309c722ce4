package face

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Faces and batches (protocol v2): PutFace, AddPersons, a person's face, the acks' have
// and results.

// testFace is 4,105 bytes: every byte value sixteen times, then "faceagent".
func testFace() []byte {
	var b []byte
	for range 16 {
		for i := range 256 {
			b = append(b, byte(i))
		}
	}
	return append(b, "faceagent"...)
}

const (
	testFaceSHA = "388d24ccb9b4d188ef672044e2d446661496270964cb12e554800d70261de375" // of testFace
	tinyFaceSHA = "773b5b667b9fde684c4ea3c0fe0e4928f5b16882d01a64f1e9b63d5f294c8924" // of tinyFace
)

var tinyFace = []byte("\x00\x01\xfe\xffface") // base64 AAH+/2ZhY2U=

// The vectors were computed with Python's hashlib (hashlib.sha256 over the face bytes, and
// over "\n".join of the record's fields), independently of this code.
func TestFaceRevAndDigestVectors(t *testing.T) {
	if got := FaceSHA256(testFace()); got != testFaceSHA {
		t.Fatalf("FaceSHA256 = %s", got)
	}
	if got := FaceSHA256(tinyFace); got != tinyFaceSHA {
		t.Fatalf("FaceSHA256(tiny) = %s", got)
	}
	p := Person{ID: "1003", Name: "Cai Wen", ValidFrom: "2026-01-01T00:00:00+08:00",
		Face: FaceRef{SHA256: testFaceSHA, Size: 4105, Kind: FaceTemplate}}
	r3 := RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, p.Face.SHA256)
	if r3.String() != "c4a73ace64c0834e" {
		t.Fatalf("rev with a face: %s", r3)
	}
	if got := PersonRecordRev(&p); got != r3 {
		t.Fatalf("PersonRecordRev = %s, want %s", got, r3)
	}
	// Size and kind are not part of the record's rev: only what identifies the face is.
	p.Face.Size, p.Face.Kind = 0, ""
	if got := PersonRecordRev(&p); got != r3 {
		t.Fatalf("size and kind changed the rev: %s", got)
	}
	p.Face = FaceRef{}
	if got := PersonRecordRev(&p); got == r3 || got != RecordRev("1003", "Cai Wen", "2026-01-01T00:00:00+08:00", "", "") {
		t.Fatalf("rev without the face: %s", got)
	}
	var d Digest
	d.Toggle("1001", RecordRev("1001", "Ann Lee", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", ""))
	d.Toggle("1002", RecordRev("1002", "Bo", "", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"))
	d.Toggle("1003", r3)
	if d.String() != "0cb2ad986c7ec013" {
		t.Fatalf("three persons, one with a face: %s", d)
	}
}

func TestParseFaceFixtures(t *testing.T) {
	cases := []struct {
		file    string
		parse   func([]byte) error
		wantErr error
		field   string
	}{
		{"command-putface.json", parseCmd, nil, ""},
		{"command-putface-probe.json", parseCmd, nil, ""},
		{"command-putface-past-size.json", parseCmd, nil, ""}, // the terminal's to refuse with 22
		{"command-putface-bad-sha.json", parseCmd, ErrInvalid, "face.sha256"},
		{"command-putface-bad-base64.json", parseCmd, ErrMalformed, ""},
		{"command-putface-size-zero.json", parseCmd, ErrInvalid, "face.size"},
		{"command-putface-offset-negative.json", parseCmd, ErrInvalid, "face.offset"},
		{"command-putface-no-face.json", parseCmd, ErrInvalid, "face.sha256"},
		{"command-addpersons.json", parseCmd, nil, ""},
		{"command-addpersons-empty.json", parseCmd, ErrInvalid, "persons"},
		{"command-addpersons-bad-kind.json", parseCmd, ErrInvalid, "persons[1].face.kind"},
		{"command-addpersons-no-id.json", parseCmd, ErrInvalid, "persons[2].id"},
		{"command-add-face.json", parseCmd, nil, ""},
		{"command-add-face-no-sha.json", parseCmd, ErrInvalid, "person.face.sha256"},
		{"command-add-face-negative-size.json", parseCmd, ErrInvalid, "person.face.size"},
		{"ack-putface.json", parseAck, nil, ""},
		{"ack-putface-hash.json", parseAck, nil, ""},
		{"ack-have-negative.json", parseAck, ErrInvalid, "have"},
		{"ack-addpersons.json", parseAck, nil, ""},
		{"ack-addpersons-no-id.json", parseAck, ErrInvalid, "results[1].id"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			err := c.parse(readTestdata(t, c.file))
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var fe *Error
			if !errors.Is(err, c.wantErr) || !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("error %v, want %v naming %q", err, c.wantErr, c.field)
			}
		})
	}
}

func TestParseFaceValues(t *testing.T) {
	c, err := ParseCommandJSON(readTestdata(t, "command-putface.json"))
	want := Command{MessageID: "PutFace-2042253-1", Op: PutFace,
		Face: FaceChunk{SHA256: tinyFaceSHA, Size: 8, Offset: 0, Data: tinyFace}}
	if err != nil || !c.Equal(&want) {
		t.Fatalf("PutFace: %+v %v", c, err)
	}
	c, err = ParseCommandJSON(readTestdata(t, "command-putface-probe.json"))
	if err != nil || len(c.Face.Data) != 0 || c.Face.Size != 8 {
		t.Fatalf("probe: %+v %v", c, err)
	}
	c, err = ParseCommandJSON(readTestdata(t, "command-addpersons.json"))
	wantPersons := []Person{
		{ID: "1001", Name: "Ann Lee", ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-01-01T00:00:00Z", Rev: "ed8b5c1121eda4fa"},
		{ID: "1003", Name: "Cai Wen", ValidFrom: "2026-01-01T00:00:00+08:00", Rev: "c4a73ace64c0834e",
			Face: FaceRef{SHA256: testFaceSHA, Size: 4105, Kind: FaceTemplate}},
	}
	if err != nil || c.Op != AddPersons || !reflect.DeepEqual(c.Persons, wantPersons) {
		t.Fatalf("AddPersons: %+v %v", c, err)
	}
	// The fixture's revs are the records' own.
	for _, p := range c.Persons {
		if PersonRecordRev(&p).String() != p.Rev {
			t.Errorf("person %s: rev %s, record rev %s", p.ID, p.Rev, PersonRecordRev(&p))
		}
	}
	a, err := ParseAckJSON(readTestdata(t, "ack-putface.json"))
	if err != nil || a.Have != 8 || a.Code != 0 {
		t.Fatalf("PutFace ack: %+v %v", a, err)
	}
	a, err = ParseAckJSON(readTestdata(t, "ack-putface-hash.json"))
	if err != nil || a.Have != 0 || a.Code != CodeFaceHash {
		t.Fatalf("PutFace ack 22: %+v %v", a, err)
	}
	a, err = ParseAckJSON(readTestdata(t, "ack-addpersons.json"))
	if err != nil || !reflect.DeepEqual(a.Results, []Result{{"1001", 0}, {"1003", CodeFaceMissing}}) {
		t.Fatalf("AddPersons ack: %+v %v", a, err)
	}
	// What the agent and terminals write takes the plain path.
	for _, file := range []string{"command-putface.json", "command-putface-probe.json", "command-addpersons.json", "command-add-face.json"} {
		if _, ok := parsePlainCommand(readTestdata(t, file)); !ok {
			t.Errorf("%s did not take the plain path", file)
		}
	}
	for _, file := range []string{"ack-putface.json", "ack-addpersons.json"} {
		if _, _, ok := parsePlainAck(readTestdata(t, file)); !ok {
			t.Errorf("%s did not take the plain path", file)
		}
	}
}

// The JSON examples of docs/protocol.md "Faces" and "Batches" are these messages, byte for
// byte.
func TestFaceJSONBytes(t *testing.T) {
	for _, c := range []struct {
		m    encoder
		want string
	}{
		{&Command{MessageID: "PutFace-2042253-1", Op: PutFace, Face: FaceChunk{SHA256: tinyFaceSHA, Size: 8, Data: tinyFace}},
			`{"messageId":"PutFace-2042253-1","op":"PutFace","face":{"sha256":"` + tinyFaceSHA + `","size":8,"offset":0,"data":"AAH+/2ZhY2U="}}`},
		{&Command{MessageID: "p", Op: PutFace, Face: FaceChunk{SHA256: tinyFaceSHA, Size: 8, Offset: 8}},
			`{"messageId":"p","op":"PutFace","face":{"sha256":"` + tinyFaceSHA + `","size":8,"offset":8}}`},
		{&Command{MessageID: "a", Op: AddPersons, Persons: []Person{{ID: "1"}, {ID: "2", Face: FaceRef{SHA256: tinyFaceSHA, Kind: FacePhoto}}}},
			`{"messageId":"a","op":"AddPersons","persons":[{"id":"1"},{"id":"2","face":{"sha256":"` + tinyFaceSHA + `","kind":"photo"}}]}`},
		{&Ack{MessageID: "p", Have: 4096}, `{"messageId":"p","code":0,"message":"","have":4096}`},
		{&Ack{MessageID: "a", Results: []Result{{"1", 0}, {"2", 21}}}, `{"messageId":"a","code":0,"message":"","results":[{"id":"1","code":0},{"id":"2","code":21}]}`},
	} {
		got, err := c.m.AppendJSON(nil)
		if err != nil || string(got) != c.want {
			t.Errorf("%+v:\ngot  %s %v\nwant %s", c.m, got, err, c.want)
		}
		if ref, _ := json.Marshal(c.m); !bytes.Equal(ref, got) {
			t.Errorf("not json.Marshal's bytes:\ngot  %s\nwant %s", got, ref)
		}
	}
}

func TestFaceMsgRoundTrip(t *testing.T) {
	face := testFace()
	for _, c := range []Command{
		{MessageID: "p-1", Op: PutFace, Face: FaceChunk{SHA256: testFaceSHA, Size: len(face), Data: face[:4096]}},
		{MessageID: "p-2", Op: PutFace, Face: FaceChunk{SHA256: testFaceSHA, Size: len(face), Offset: 4096, Data: face[4096:]}},
		{MessageID: "p-3", Op: PutFace, Face: FaceChunk{SHA256: testFaceSHA, Size: len(face)}},
		{MessageID: "a-1", Op: AddPersons, Persons: []Person{{ID: "1", Rev: "ed8b5c1121eda4fa"}, {ID: "2", Face: FaceRef{SHA256: testFaceSHA, Size: 4105}}}},
		{MessageID: "a-2", Op: AddPerson, Person: Person{ID: "2", Face: FaceRef{SHA256: testFaceSHA, Kind: FaceTemplate}}},
	} {
		b, err := c.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseCommandMsg(b)
		if err != nil || !got.Equal(&c) {
			t.Fatalf("msgp %+v: %+v %v", c, got, err)
		}
		j, _ := c.AppendJSON(nil)
		if got, err := ParseCommandJSON(j); err != nil || !got.Equal(&c) {
			t.Fatalf("JSON %s: %+v %v", j, got, err)
		}
	}
	// In msgp the data is raw bytes (bin), not base64 text.
	b, _ := (&Command{MessageID: "p", Op: PutFace, Face: FaceChunk{SHA256: tinyFaceSHA, Size: 8, Data: tinyFace}}).AppendMsg(nil)
	if !bytes.Contains(b, append([]byte{0xa4, 'd', 'a', 't', 'a', 0xc4, 8}, tinyFace...)) {
		t.Fatalf("data not as bin8 in %x", b)
	}
	for _, a := range []Ack{
		{MessageID: "p", Have: 4105},
		{MessageID: "p", Code: CodeFaceHash, Message: "hash"},
		{MessageID: "a", Results: []Result{{"1", 0}, {"2", CodeFaceMissing}, {"3", CodeCapacity}}},
	} {
		b, _ := a.AppendMsg(nil)
		if got, err := ParseAckMsg(b); err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("ack %+v: %+v %v", a, got, err)
		}
	}
}

func TestFaceBounds(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	sha := testFaceSHA
	batch := func(n int) []Person {
		out := make([]Person, n)
		for i := range out {
			out[i].ID = fmt.Sprint(i)
		}
		return out
	}
	results := func(n int) []Result { return make([]Result, n) }
	for _, c := range []struct {
		v     interface{ Validate() error }
		field string // "" valid
	}{
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha, Size: MaxFaceSize, Offset: MaxFaceSize, Data: make([]byte, MaxChunkSize)}}, ""},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha, Size: MaxFaceSize + 1}}, "face.size"},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha, Size: -1}}, "face.size"},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha, Size: 1, Offset: MaxFaceSize + 1}}, "face.offset"},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha, Size: 1, Data: make([]byte, MaxChunkSize+1)}}, "face.data"},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha[1:], Size: 1}}, "face.sha256"},
		{&Command{MessageID: "m", Op: PutFace, Face: FaceChunk{SHA256: sha[1:] + "g", Size: 1}}, "face.sha256"},
		{&Command{MessageID: "", Op: PutFace}, "messageId"},
		{&Command{MessageID: "m", Op: AddPersons, Persons: batch(MaxBatch)}, ""},
		{&Command{MessageID: "m", Op: AddPersons, Persons: batch(MaxBatch + 1)}, "persons"},
		{&Command{MessageID: "m", Op: AddPersons, Persons: []Person{{ID: "1"}, {ID: long}}}, "persons[1].id"},
		{&Command{MessageID: "m", Op: AddPersons, Persons: []Person{{ID: "1", ValidTo: "soon"}}}, "persons[0].validTo"},
		{&Command{MessageID: "m", Op: AddPersons, Persons: []Person{{ID: "1", Rev: "x"}}}, "persons[0].rev"},
		{&Command{MessageID: "m", Op: AddPersons, Persons: []Person{{ID: "1", Name: strings.Repeat("n", MaxTextLen+1)}}}, "persons[0].name"},
		{&Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "1", Face: FaceRef{SHA256: sha, Size: MaxFaceSize + 1}}}, "person.face.size"},
		{&Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "1", Face: FaceRef{Kind: FacePhoto}}}, "person.face.sha256"},
		{&Command{MessageID: "m", Op: AddPerson, Person: Person{ID: "1", Face: FaceRef{SHA256: sha, Size: MaxFaceSize, Kind: FacePhoto}}}, ""},
		{&Command{MessageID: "m", Op: DeletePerson, Person: Person{ID: "1", Face: FaceRef{SHA256: strings.ToUpper(sha)}}}, "person.face.sha256"},
		{&Ack{MessageID: "m", Have: MaxFaceSize}, ""},
		{&Ack{MessageID: "m", Have: MaxFaceSize + 1}, "have"},
		{&Ack{MessageID: "m", Results: results(MaxBatch + 1)}, "results"},
		{&Ack{MessageID: "m", Results: []Result{{long, 0}}}, "results[0].id"},
		{&Ack{MessageID: "m", Results: []Result{{"1", math.MaxInt32}, {"2", -1}}}, ""},
	} {
		err := c.v.Validate()
		var fe *Error
		if c.field == "" && err != nil || c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%.200v: %v, want field %q", c.v, err, c.field)
		}
	}
	h := Heartbeat{Batch: MaxBatch + 5}
	if h.Validate() != nil || h.BatchSize() != MaxBatch {
		t.Fatalf("a terminal offering more than MaxBatch: %v, batch size %d", h.Validate(), h.BatchSize())
	}
}

// A msgp array header claiming more persons or results than MaxBatch is refused before
// anything is allocated for them.
func TestFaceMsgArrayLimits(t *testing.T) {
	b, _ := (&Command{MessageID: "a", Op: AddPersons, Persons: make([]Person, MaxBatch+1)}).MarshalMsg(nil)
	if _, err := ParseCommandMsg(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("MaxBatch+1 persons in msgp: %v", err)
	}
	b, _ = (&Ack{MessageID: "a", Results: make([]Result, MaxBatch+1)}).MarshalMsg(nil)
	if _, err := ParseAckMsg(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("MaxBatch+1 results in msgp: %v", err)
	}
	for _, prefix := range [][]byte{
		append(mustMsg(t, &Command{MessageID: "a", Op: AddPersons, Persons: []Person{{ID: "1"}}}), 0),
		append(mustMsg(t, &Ack{MessageID: "a", Results: []Result{{"1", 0}}}), 0),
	} {
		// Replace the one-element array header (0x91) by array32 of 2^31-1, cut after it.
		i := bytes.LastIndexByte(prefix, 0x91)
		huge := append(append([]byte{}, prefix[:i]...), 0xdd, 0x7f, 0xff, 0xff, 0xff)
		if _, err := ParseCommandMsg(huge); err == nil {
			t.Fatal("huge command array accepted")
		}
		if _, err := ParseAckMsg(huge); err == nil {
			t.Fatal("huge ack array accepted")
		}
	}
}

func mustMsg(t testing.TB, m encoder) []byte {
	t.Helper()
	b, err := m.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The largest chunk ChunkLimitFor allows fits, with every other field at its bound; one
// byte more does not.
func TestChunkLimitFor(t *testing.T) {
	worst := func(n int) int {
		c := Command{MessageID: strings.Repeat("m", MaxIDLen), Op: PutFace,
			Face: FaceChunk{SHA256: testFaceSHA, Size: MaxFaceSize, Offset: MaxFaceSize, Data: make([]byte, n)}}
		b, err := c.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	for _, size := range []int{0, 100, 261, 262, 263, 300, 517, 518, 519, 520, 1024, 4096, 4608, 65535, 65796, 65797, 65798, 65799, 65800, 70000, 1 << 20} {
		n := ChunkLimitFor(size)
		if n < 0 || n > MaxChunkSize {
			t.Fatalf("ChunkLimitFor(%d) = %d", size, n)
		}
		if n > 0 {
			if got := worst(n); got > size {
				t.Errorf("ChunkLimitFor(%d) = %d: the command takes %d bytes", size, n, got)
			}
		}
		if n < MaxChunkSize {
			if got := worst(n + 1); got <= size {
				t.Errorf("ChunkLimitFor(%d) = %d, but %d bytes fit (%d)", size, n, n+1, got)
			}
		}
	}
	if ChunkLimitFor(1<<30) != MaxChunkSize {
		t.Fatalf("ChunkLimitFor(1 GiB) = %d", ChunkLimitFor(1<<30))
	}
}

// The faces' JSON is json.Marshal's for any field values, and what validates survives
// both codecs unchanged.
func FuzzEncodeFacesJSON(f *testing.F) {
	f.Add("PutFace-1", tinyFaceSHA, 8, 0, tinyFace, "1\n2", "template", 21)
	f.Add("", "", 0, -1, []byte(nil), "", "", 0)
	f.Add("<&>", strings.ToUpper(tinyFaceSHA), MaxFaceSize+1, 9, []byte{0}, "a\n\nb", "\u2028", -1)
	f.Fuzz(func(t *testing.T, id, sha string, size, offset int, data []byte, ids, kind string, code int) {
		c := Command{MessageID: id, Op: PutFace, Face: FaceChunk{SHA256: sha, Size: size, Offset: offset, Data: data}}
		checkMarshal(t, &c, appendCommandJSON(nil, &c))
		c2 := Command{MessageID: id, Op: AddPersons}
		a := Ack{MessageID: id, Code: code, Have: size}
		if ids != "" {
			for _, pid := range strings.Split(ids, "\n") {
				c2.Persons = append(c2.Persons, Person{ID: pid, Face: FaceRef{SHA256: sha, Size: offset, Kind: FaceKind(kind)}})
				a.Results = append(a.Results, Result{pid, code})
			}
		}
		checkMarshal(t, &c2, appendCommandJSON(nil, &c2))
		checkMarshal(t, &a, appendAckJSON(nil, &a))
		for _, s := range []string{id, sha, ids, kind} {
			if !utf8.ValidString(s) {
				return // JSON writes invalid UTF-8 as U+FFFD, msgp keeps the bytes
			}
		}
		for _, c := range []*Command{&c, &c2} {
			if c.Validate() != nil {
				continue
			}
			j, _ := c.AppendJSON(nil)
			m, _ := c.AppendMsg(nil)
			checkParsersAgree(t, j)
			backJ, errJ := ParseCommandJSON(j)
			backM, errM := ParseCommandMsg(m)
			if errJ != nil || errM != nil || !backJ.Equal(c) || !backM.Equal(c) {
				t.Fatalf("%+v:\nJSON %+v %v\nmsgp %+v %v", c, backJ, errJ, backM, errM)
			}
		}
		if a.Validate() == nil {
			j, _ := a.AppendJSON(nil)
			m, _ := a.AppendMsg(nil)
			checkParsersAgree(t, j)
			backJ, errJ := ParseAckJSON(j)
			backM, errM := ParseAckMsg(m)
			if errJ != nil || errM != nil || !reflect.DeepEqual(backJ, backM) {
				t.Fatalf("%+v:\nJSON %+v %v\nmsgp %+v %v", a, backJ, errJ, backM, errM)
			}
		}
	})
}

func checkMarshal(t *testing.T, v any, got []byte) {
	t.Helper()
	want, _ := json.Marshal(v)
	if !bytes.Equal(got, want) {
		t.Fatalf("%#v:\ngot  %s\nwant %s", v, got, want)
	}
}

// FuzzParseFacesMsg: PutFace, AddPersons and their acks in msgp, from the fixtures and
// mutated: never a panic, a classified error or a message that re-encodes to itself.
func FuzzParseFacesMsg(f *testing.F) {
	face := testFace()
	for _, m := range []encoder{
		&Command{MessageID: "p", Op: PutFace, Face: FaceChunk{SHA256: testFaceSHA, Size: len(face), Data: face[:300]}},
		&Command{MessageID: "p", Op: PutFace, Face: FaceChunk{SHA256: testFaceSHA, Size: len(face), Offset: 4105}},
		&Command{MessageID: "a", Op: AddPersons, Persons: []Person{{ID: "1", Face: FaceRef{SHA256: testFaceSHA, Size: 1, Kind: FacePhoto}}, {ID: "2"}}},
		&Ack{MessageID: "p", Have: 4096},
		&Ack{MessageID: "a", Results: []Result{{"1", 0}, {"2", 21}}},
	} {
		f.Add(mustMsg(f, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := ParseCommandMsg(b); err == nil {
			out, _ := c.AppendMsg(nil)
			if back, err := ParseCommandMsg(out); err != nil || !back.Equal(&c) {
				t.Fatalf("re-encoding changed the command: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
		if a, err := ParseAckMsg(b); err == nil {
			out, _ := a.AppendMsg(nil)
			back, err := ParseAckMsg(out)
			if len(a.Persons) == 0 {
				a.Persons = nil
			}
			if len(a.Results) == 0 {
				a.Results = nil
			}
			if err != nil || !reflect.DeepEqual(back, a) {
				t.Fatalf("re-encoding changed the ack: %+v %v", back, err)
			}
		} else {
			checkErr(t, err)
		}
	})
}
