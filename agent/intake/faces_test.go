package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// storeFaces is the root's adapter of a real face store (agent/facestore.go), for tests.
type storeFaces struct{ s *faces.Store }

func (f storeFaces) Hold() FaceHold { return storePin{f.s, f.s.Pin()} }

type storePin struct {
	s *faces.Store
	p *faces.Pin
}

func (p storePin) Put(sha string, data []byte) error {
	sum, err := faces.ParseSum(sha)
	if err == nil {
		err = p.p.Put(sum, int64(len(data)), bytes.NewReader(data))
	}
	if errors.Is(err, faces.ErrBudget) {
		return refusedFace{err}
	}
	return err
}

type refusedFace struct{ error }

func (e refusedFace) Is(target error) bool { return target == ErrRefused }

func (p storePin) Keep(sha string) (int64, bool) {
	sum, err := faces.ParseSum(sha)
	if err != nil || !p.p.Keep(sum) {
		return 0, false
	}
	n, _ := p.s.Size(sum)
	return n, true
}

func (p storePin) Release() { p.p.Release() }

// sweepingDesired is memDesired whose Flush sweeps the face store as if only the faces of
// the messages taken before (durable) were referred to: the faces of the message being
// taken must survive it (held).
type sweepingDesired struct {
	memDesired
	t       *testing.T
	store   *faces.Store
	swept   int
	durable map[faces.Sum]bool
}

func (d *sweepingDesired) Flush() error {
	d.swept++
	before := d.store.Stats().Faces
	if n, err := d.store.Sweep(d.store.Mark(), func(s faces.Sum) bool { return d.durable[s] }); n != 0 || err != nil {
		d.t.Errorf("a sweep while a message is taken removed %d of its %d faces (%v)", n, before, err)
	}
	return d.memDesired.Flush()
}

func faceData(seed, n int) (data []byte, sum, b64 string) {
	data = make([]byte, n)
	for i := range data {
		data[i] = byte(seed*7 + i*13 + i>>9)
	}
	s := sha256.Sum256(data)
	return data, hex.EncodeToString(s[:]), base64.StdEncoding.EncodeToString(data)
}

func addFace(task, dev, id, faceJSON string) string {
	return fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":{"id":%q,"name":"N","face":%s}}`, task, dev, id, faceJSON)
}

// TestTakerFaces: a message's faces are stored once and held until its desired-state
// change is durable; a later task (of the same message or another) may refer to a face
// without its data; a face the gateway does not hold, sent without data, dead-letters its
// task alone with a reason naming the face and the person; so does a face over the
// store's budget ([faces] max_bytes). Commands carry the face's ref with its size.
func TestTakerFaces(t *testing.T) {
	fs, err := faces.Open(t.TempDir(), faces.Options{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	sent := make(chan outbox.Command, 8)
	ob := openOutbox(t, func(_ context.Context, _ string, c outbox.Command) error {
		c.Payload = append([]byte(nil), c.Payload...)
		sent <- c
		return nil
	}, "d1", "d2")
	take := NewTaker(Options{Devices: []string{"d1", "d2"}}, nil)
	d := &sweepingDesired{t: t, store: fs, durable: map[faces.Sum]bool{}}
	take.OpenDesired(d)
	take.OpenFaces(storeFaces{fs})
	dead := &deadList{max: 10}
	take.Open(ob, dead)
	ctx := context.Background()

	_, sum1, b641 := faceData(1, 1024)
	_, sum2, _ := faceData(2, 10)
	_, sum3, b643 := faceData(3, 100<<10)
	msgs := []string{
		// The first brings the face; the second, of the same message, refers to it.
		`[` + addFace("t1", "d1", "p1", `{"sha256":"`+sum1+`","kind":"template","data":"`+b641+`"}`) + `,` +
			addFace("t2", "d2", "p2", `{"sha256":"`+sum1+`"}`) + `]`,
		addFace("t3", "d1", "p3", `{"sha256":"`+sum2+`"}`), // not held, no data
		`[` + addFace("t4", "d1", "p4", `{"sha256":"`+sum3+`","data":"`+b643+`"}`) + `,` + // over the budget
			string(add("t5", "d2", "p5", "Five")) + `]`,
	}
	for _, m := range msgs {
		if err := take.Accept(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		d.durable[mustSum(t, sum1)] = true // p1 and p2 refer to it from the first on
	}
	if st := fs.Stats(); st.Faces != 1 || !fs.Has(mustSum(t, sum1)) {
		t.Fatalf("store holds %d faces, want the one face of p1 and p2", st.Faces)
	}
	if d.swept != 2 { // the second message has no task left to apply
		t.Fatalf("%d flushes", d.swept)
	}
	if len(dead.list) != 2 {
		t.Fatalf("deadletters %q", dead.list)
	}
	for i, want := range []string{
		`person.face: face ` + sum2 + ` of person \"p3\": not held by this gateway`,
		`person.face: face ` + sum3 + ` of person \"p4\": faces: over the disk budget [faces] max_bytes = 65536`,
	} {
		if !strings.Contains(dead.list[i], want) {
			t.Errorf("deadletter %d: %.300s\nwant a reason with %s", i, dead.list[i], want)
		}
	}
	if !strings.Contains(strings.ReplaceAll(dead.list[1], `\"`, `"`), `"taskId":"t4"`) || strings.Contains(dead.list[1], `t5`) {
		t.Errorf("the refused element is not dead-lettered alone: %.200s", dead.list[1])
	}
	ob.Heartbeat("d1")
	ob.Heartbeat("d2")
	want := face.FaceRef{SHA256: sum1, Size: 1024, Kind: face.FaceTemplate}
	got := map[string]face.Command{}
	for len(got) < 2 {
		select {
		case c := <-sent:
			cmd, err := face.ParseCommandMsg(c.Payload)
			if err != nil {
				t.Fatal(err)
			}
			got[cmd.Person.ID] = cmd
		case <-time.After(10 * time.Second):
			t.Fatalf("commands sent: %d", len(got))
		}
	}
	for _, id := range []string{"p1", "p2"} {
		p := got[id].Person
		wantFace := want
		if id == "p2" {
			wantFace.Kind = "" // as the task said: the size is the store's
		}
		if p.Face != wantFace || p.Rev != face.PersonRecordRev(&p).String() {
			t.Errorf("%s: command's person %+v, want face %+v and the rev with it", id, p, wantFace)
		}
	}
	// Released once taken: nothing refers to the face any more, a sweep removes it.
	if n, err := fs.Sweep(fs.Mark(), func(faces.Sum) bool { return false }); n != 1 || err != nil {
		t.Fatalf("sweep after the messages: %d %v", n, err)
	}
}

func mustSum(t *testing.T, s string) faces.Sum {
	t.Helper()
	sum, err := faces.ParseSum(s)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// BenchmarkTakerFace: Accept of one AddPerson whose person carries a face with its data,
// each a new face (stored: written, fsynced, renamed), against the same task without a
// face: the bytes Accept allocates beyond Parse's are the commands and journal records,
// not copies of the face (the store writes it from the parsed task's buffer).
func BenchmarkTakerFace(b *testing.B) {
	for _, size := range []int{0, 1 << 10, 100 << 10} {
		name := "no-face"
		if size > 0 {
			name = fmt.Sprintf("%dKiB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			fs, err := faces.Open(b.TempDir(), faces.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			ob, err := outbox.Open(b.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }),
				&outbox.Options{Journal: journal.Options{Sync: journal.SyncNone}, Devices: map[string]outbox.DeviceConfig{"d1": {}}})
			if err != nil {
				b.Fatal(err)
			}
			defer ob.Close()
			take := NewTaker(Options{Devices: []string{"d1"}, MaxBatch: 1}, nil)
			take.OpenFaces(storeFaces{fs})
			take.Open(ob, &deadList{max: 1})
			msgs := make([][]byte, b.N)
			for i := range msgs {
				if size == 0 {
					msgs[i] = add(fmt.Sprint("t", i), "d1", fmt.Sprint("p", i), "N")
					continue
				}
				_, sum, b64 := faceData(i, size)
				msgs[i] = []byte(addFace(fmt.Sprint("t", i), "d1", fmt.Sprint("p", i), `{"sha256":"`+sum+`","data":"`+b64+`"}`))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := take.Accept(context.Background(), msgs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
