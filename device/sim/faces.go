package sim

import (
	"sort"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Faces and batches on the terminal's side (protocol v2): the faces it holds by SHA-256,
// the one face it is receiving (PutFace's resume rule), persons that refer to a face, and
// AddPersons' per-person results.

// Codes a simulated terminal answers for faces and batches.
const (
	// FaceMissingCode refuses a person whose face the terminal does not hold.
	FaceMissingCode = face.CodeFaceMissing
	// FaceHashCode refuses a PutFace chunk that runs past the face's size, or the last
	// chunk of a face whose bytes do not hash to its sha256; the face is discarded.
	FaceHashCode = face.CodeFaceHash
	// BatchTooLargeCode refuses, as a whole, an AddPersons with more persons than the
	// terminal's batch (the simulator's choice of refusal code).
	BatchTooLargeCode = 2
)

// cutCode is execute's answer for a PutFace the terminal was told to cut short: it kept
// part of the chunk, and dies before answering (Terminal.SetCutFace).
const cutCode = -1

// receiving is the face a terminal is receiving: its bytes from 0 so far.
type receiving struct {
	sha  string
	size int
	data []byte
}

// putFace applies one PutFace chunk and returns the ack's code and have, as the protocol
// says: a face held already answers have = its size; a chunk whose offset is not have is
// ignored (have as it is); a chunk running past the size, or a complete face whose hash
// differs, is FaceHashCode and the face is discarded (have 0). A chunk at offset 0 of
// another face starts that face, dropping the one being received: the terminal receives
// one face at a time. Called with mu held.
func (t *Terminal) putFace(c *face.FaceChunk) (code, have int) {
	t.stats.FaceChunks++
	if data, ok := t.faces[c.SHA256]; ok {
		return 0, len(data)
	}
	r := &t.receiving
	if r.sha != c.SHA256 || r.size != c.Size {
		if c.Offset != 0 {
			return 0, 0 // not this face's have (nothing of it held)
		}
		*r = receiving{sha: c.SHA256, size: c.Size, data: make([]byte, 0, min(c.Size, 64<<10))}
	}
	have = len(r.data)
	if c.Offset != have {
		return 0, have
	}
	if c.Offset+len(c.Data) > c.Size {
		*r = receiving{}
		t.stats.FaceRejects++
		return FaceHashCode, 0
	}
	cut, past := t.cutFace, have+len(c.Data) > t.cutFace && !t.cut[c.SHA256]
	if t.cutEvery > 0 {
		// The next multiple past what it holds; a chunk ending on it is cut too (kept
		// whole, not acked), so chunks aligned to the multiple are cut as well.
		cut = (have/t.cutEvery + 1) * t.cutEvery
		past = have+len(c.Data) >= cut && have+len(c.Data) < r.size
	}
	if cut > 0 && past && have < cut {
		r.data = append(r.data, c.Data[:min(cut-have, len(c.Data))]...)
		t.cut[c.SHA256] = true
		t.stats.FaceCuts++
		return cutCode, len(r.data)
	}
	r.data = append(r.data, c.Data...)
	if len(r.data) < r.size {
		return 0, len(r.data)
	}
	data := r.data
	*r = receiving{}
	if face.FaceSHA256(data) != c.SHA256 {
		t.stats.FaceRejects++
		return FaceHashCode, 0
	}
	t.faces[c.SHA256] = data
	return 0, len(data)
}

// faceHave is what the terminal holds of the face sha: its size when held, the bytes
// received so far when it is the face being received, else 0. Called with mu held.
func (t *Terminal) faceHave(sha string) int {
	if data, ok := t.faces[sha]; ok {
		return len(data)
	}
	if t.receiving.sha == sha {
		return len(t.receiving.data)
	}
	return 0
}

// addPerson stores p as AddPerson does and returns its code: CapacityCode for a new
// person on a full terminal, FaceMissingCode (v2) for a face the terminal does not hold.
// Called with mu held.
func (t *Terminal) addPerson(p face.Person) int {
	_, held := t.persons[p.ID]
	if !held && t.capacity > 0 && len(t.persons) >= t.capacity {
		return CapacityCode
	}
	if t.protocol < 2 {
		p.Rev, p.Face = "", face.FaceRef{} // a v1 terminal knows neither
	} else if p.Face.SHA256 != "" {
		if _, ok := t.faces[p.Face.SHA256]; !ok {
			return FaceMissingCode
		}
	}
	t.put(p)
	return 0
}

// addPersons applies an AddPersons batch in order and returns its per-person results.
// Called with mu held.
func (t *Terminal) addPersons(persons []face.Person) []face.Result {
	out := make([]face.Result, len(persons))
	for i, p := range persons {
		out[i] = face.Result{ID: p.ID, Code: t.addPerson(p)}
	}
	t.stats.Batches++
	return out
}

// Face returns a copy of the face with that sha256 if the terminal holds it (complete and
// checked), byte for byte as received.
func (t *Terminal) Face(sha string) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	data, ok := t.faces[sha]
	return append([]byte(nil), data...), ok
}

// Faces returns the sha256 of every face the terminal holds, sorted.
func (t *Terminal) Faces() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.faces))
	for sha := range t.faces {
		out = append(out, sha)
	}
	sort.Strings(out)
	return out
}

// FaceHave returns what the terminal holds of the face sha, as a PutFace ack would say:
// its size when held, the bytes received so far while receiving it, else 0.
func (t *Terminal) FaceHave(sha string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.faceHave(sha)
}

// TamperFace stores data as the face with that sha256 without checking it, as a
// corrupted flash would; a person referring to sha is then taken.
func (t *Terminal) TamperFace(sha string, data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.faces[sha] = append([]byte(nil), data...)
}

// DeleteFace forgets the face sha (held or being received); false if it had none of it.
func (t *Terminal) DeleteFace(sha string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, held := t.faces[sha]
	delete(t.faces, sha)
	if t.receiving.sha == sha {
		t.receiving = receiving{}
		held = true
	}
	return held
}

// SetCutFace makes the terminal cut the transfer of every face it has not cut before once
// it holds n bytes of it (0: never): the chunk that would take it past n is kept up to n
// bytes, and the terminal crashes before acking it (offline for CrashDowntime, a cut frame
// on a serial line). The agent's resend then learns have = n and resumes from there.
func (t *Terminal) SetCutFace(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cutFace = max(n, 0)
}

// SetCutFaceEvery makes the terminal cut every face transfer each time it would pass a
// multiple of n bytes (0: never), as SetCutFace does once: a line that keeps breaking.
func (t *Terminal) SetCutFaceEvery(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cutEvery = max(n, 0)
}

// SetBatch sets the most persons one AddPersons may carry (0: no batches, AddPersons is
// refused as an unknown op), reported in v2 heartbeats.
func (t *Terminal) SetBatch(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batch = min(max(n, 0), face.MaxBatch)
}
