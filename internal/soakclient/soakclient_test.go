package soakclient

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

func dial(t *testing.T, addr string, o Options) *Client {
	t.Helper()
	o.Addr = addr
	if o.ClientID == "" {
		o.ClientID = "soak-" + strings.ReplaceAll(t.Name(), "/", "-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *Client, o RunOptions) (*Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Run(ctx, o)
}

// Every request carries what the SDK's carry, packet ids in sequence after the SUBSCRIBE's.
func TestRequestsLookLikeTheSDKs(t *testing.T) {
	var mu sync.Mutex
	var seen []*seenRequest
	held := map[string][]byte{}
	s := &scripted{onRequest: func(s *scripted, req *seenRequest) bool {
		mu.Lock()
		seen = append(seen, req)
		reply, user := correct(req, held)
		mu.Unlock()
		s.answer(req, reply, false, user...)
		return false
	}}
	c := dial(t, startScripted(t, s), Options{ClientID: "sdk-shape"})
	rep, err := run(t, c, RunOptions{Requests: 40, InFlight: 1})
	if err != nil || rep.Err() != nil {
		t.Fatalf("%v\n%v", err, rep.Err())
	}
	wantTopic := "clients/73646B2D7368617065/" + sswire.InvokeTopic + "/response"
	tsRe := regexp.MustCompile(`^\d{15}:\d{5}:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 40 {
		t.Fatalf("%d requests seen, want 40", len(seen))
	}
	uuidRe := regexp.MustCompile(`^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`)
	for i, r := range seen {
		if !uuidRe.MatchString(fmt.Sprintf("%x", r.corr)) {
			t.Fatalf("request %d: correlation data %x is not a version 4 UUID", i, r.corr)
		}
		if r.n != i || r.id != uint16(i+2) || r.dup || len(r.corr) != 16 || string(r.respTopic) != wantTopic ||
			r.src != "sdk-shape" || r.partn != "sdk-shape" || !r.hasPrio || !tsRe.MatchString(r.ts) ||
			r.expiry != 10 || r.ctype != "application/octet-stream" || !r.payloadFormatSet || r.op != ops[i%4] {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if rep.Answered != 40 || rep.P50 <= 0 || rep.Max < rep.P99 {
		t.Fatalf("report %v", rep)
	}
}

// Wrong answers are each named: a wrong value, a missing value, __ts where there is no
// version, a bad __stat.
func TestWrongAnswersAreCaught(t *testing.T) {
	held := map[string][]byte{}
	s := &scripted{onRequest: func(s *scripted, req *seenRequest) bool {
		reply, user := correct(req, held)
		switch req.n {
		case 1: // GET of the value just set
			reply = "$3\r\nxyz\r\n"
		case 3: // GET of the deleted key
			user = append(user, "__ts", fmt.Sprintf("%015d:00000:store", time.Now().UnixMilli()))
		case 4:
			user[1] = "500"
		case 5:
			reply, user = "$-1\r\n", user[:4]
		}
		s.answer(req, reply, false, user...)
		return false
	}}
	c := dial(t, startScripted(t, s), Options{})
	rep, err := run(t, c, RunOptions{Requests: 8, InFlight: 1, ValueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Answered != 8 || rep.Problems != 4 {
		t.Fatalf("%v\n%s", rep, rep.FirstProblem)
	}
	for _, want := range []string{
		`request 1: GET "xyz", want "v0v0"`,
		`request 3: GET of a missing key answered with __ts`,
		`request 4: __stat "500"`,
		`request 5: GET $-1, want "v4v4"`,
	} {
		if !strings.Contains(rep.FirstProblem, want) {
			t.Errorf("no %q in\n%s", want, rep.FirstProblem)
		}
	}
	if rep.Err() == nil {
		t.Error("Err() = nil with wrong answers")
	}
}

// After a dropped connection the client resumes the session, sends again with DUP under
// the same packet id the request the broker had not acknowledged, and counts what comes
// back: that request's kept answer and its new one (allowed), an answer it acknowledged
// before the drop (a phantom, unless acknowledged within AckGrace of the drop), and one
// it never asked for (unknown).
func TestResumeCountsExactly(t *testing.T) {
	for _, c := range []struct {
		name              string
		grace             time.Duration
		phantoms, repeats int
	}{
		{"phantom", time.Nanosecond, 1, 1},
		{"within grace", time.Hour, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			held := map[string][]byte{}
			var kept, answered3 *seenRequest
			var resent *seenRequest
			var firstID uint16
			s := &scripted{sessionPresent: func(conn int) bool { return conn > 0 }}
			s.onRequest = func(s *scripted, req *seenRequest) bool {
				reply, user := correct(req, held)
				if req.n == 10 && !req.dup {
					kept, firstID = req, req.id // runs, but the connection drops before PUBACK
					return true
				}
				if req.n == 10 {
					resent = req
				}
				if req.n == 3 {
					answered3 = req
				}
				s.answer(req, reply, false, user...)
				return false
			}
			s.onConnect = func(s *scripted, conn int) {
				if conn == 0 {
					return
				}
				ok := []string{"__stat", "200", "__protVer", "1.0"}
				s.answer(answered3, "$-1\r\n", true, ok...)
				stranger := *kept
				stranger.corr = []byte("0123456789abcdef")
				s.answer(&stranger, ":0\r\n", true, ok...)
				s.answer(kept, ":1\r\n", true, append(ok, "__ts", "000000000000001:00000:x")...)
			}
			cl := dial(t, startScripted(t, s), Options{Reconnect: 10 * time.Second, AckGrace: c.grace})
			rep, err := run(t, cl, RunOptions{Requests: 20, InFlight: 1})
			if err != nil {
				t.Fatal(err)
			}
			if resent == nil || !resent.dup || resent.id != firstID {
				t.Fatalf("request 10 sent again as %+v, want DUP with packet id %d", resent, firstID)
			}
			if rep.Answered != 20 || rep.Unanswered != 0 || rep.Drops != 1 || rep.Resumes != 1 || rep.Resent != 1 ||
				rep.Phantoms != c.phantoms || rep.Repeats != c.repeats || rep.Unknown != 1 || rep.AcrossDrop != 1 {
				t.Fatalf("%v\n%s", rep, rep.FirstProblem)
			}
			if c.phantoms > 0 && !strings.Contains(rep.FirstProblem, "phantom: answer 2 to request 3") {
				t.Errorf("the phantom is not named:\n%s", rep.FirstProblem)
			}
			if rep.Err() == nil {
				t.Error("Err() = nil with an unknown answer")
			}
		})
	}
}

// A reconnect that finds no session ends the client, as the SDK's SessionLostError does.
func TestSessionLostEndsTheRun(t *testing.T) {
	held := map[string][]byte{}
	s := &scripted{sessionPresent: func(int) bool { return false }}
	s.onRequest = func(s *scripted, req *seenRequest) bool {
		if req.n == 5 {
			return true
		}
		reply, user := correct(req, held)
		s.answer(req, reply, false, user...)
		return false
	}
	cl := dial(t, startScripted(t, s), Options{Reconnect: 10 * time.Second})
	rep, err := run(t, cl, RunOptions{Requests: 20, InFlight: 1})
	if !errors.Is(err, ErrSessionLost) || rep.Answered != 5 {
		t.Fatalf("%v; %v", err, rep)
	}
}

// A request the broker never answers is given up after Timeout, and Run ends once nothing
// is answered for Stall.
func TestStallIsReported(t *testing.T) {
	held := map[string][]byte{}
	s := &scripted{onRequest: func(s *scripted, req *seenRequest) bool {
		if req.n < 6 {
			reply, user := correct(req, held)
			s.answer(req, reply, false, user...)
		}
		return false
	}}
	cl := dial(t, startScripted(t, s), Options{Timeout: 300 * time.Millisecond})
	rep, err := run(t, cl, RunOptions{Requests: 100, InFlight: 2, Stall: time.Second})
	if err == nil || !strings.Contains(err.Error(), "stalled: no answer for 1s after 6 of 100") || !rep.Stalled || rep.Answered != 6 || rep.TimedOut == 0 {
		t.Fatalf("%v; %v", err, rep)
	}
}

// A Barrier bounds what may come again after a drop better than AckGrace: an answer
// acknowledged before it is a phantom however recent, one acknowledged after it is not.
func TestBarrierBoundsWhatMayComeAgain(t *testing.T) {
	held := map[string][]byte{}
	var mu sync.Mutex
	answers := map[int]*seenRequest{}
	replies := map[int][]string{}
	var waiting *seenRequest
	seen9, seen9Once := make(chan struct{}), sync.Once{}
	s := &scripted{sessionPresent: func(conn int) bool { return conn > 0 }}
	s.onRequest = func(s *scripted, req *seenRequest) bool {
		mu.Lock()
		defer mu.Unlock()
		if req.n == 12 && !req.dup {
			return true // the connection drops before this one is acknowledged
		}
		reply, user := correct(req, held)
		answers[req.n], replies[req.n] = req, append([]string{reply}, user...)
		if req.n == 9 {
			waiting = req // answered after the barrier
			seen9Once.Do(func() { close(seen9) })
			return false
		}
		s.answer(req, reply, false, user...)
		return false
	}
	s.onBarrier = func(s *scripted) {
		mu.Lock()
		defer mu.Unlock()
		s.answer(waiting, replies[9][0], false, replies[9][1:]...)
	}
	s.onConnect = func(s *scripted, conn int) {
		if conn == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, n := range []int{3, 9} { // kept although acknowledged: 3 before the barrier, 9 after
			s.answer(answers[n], replies[n][0], true, replies[n][1:]...)
		}
	}
	c := dial(t, startScripted(t, s), Options{Reconnect: 10 * time.Second, AckGrace: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan *Report, 1)
	go func() {
		rep, err := c.Run(ctx, RunOptions{Requests: 20, InFlight: 1})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	if err := c.WaitAnswered(ctx, 9); err != nil {
		t.Fatal(err)
	}
	// The client sends request 9 once 9 are answered; the barrier must reach the broker
	// after it, or there is nothing yet to answer after the barrier.
	select {
	case <-seen9:
	case <-ctx.Done():
		t.Fatal("request 9 never reached the broker")
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	rep := <-done
	if rep.Answered != 20 || rep.Drops != 1 || rep.Phantoms != 1 || rep.Repeats != 1 || rep.Unknown != 0 ||
		!strings.Contains(rep.FirstProblem, "phantom: answer 2 to request 3,") {
		t.Fatalf("%v\n%s", rep, rep.FirstProblem)
	}
}

// A request the broker acknowledged but never answered across a drop is a lost answer, an
// error either way; counted as lost in a crash when no barrier covers it, not when a
// barrier written after it said its answer was stored.
func TestLostAnswers(t *testing.T) {
	for _, covered := range []bool{false, true} {
		t.Run(fmt.Sprintf("barrier=%v", covered), func(t *testing.T) {
			held := map[string][]byte{}
			seen10 := make(chan struct{})
			s := &scripted{sessionPresent: func(conn int) bool { return conn > 0 }}
			s.onRequest = func(s *scripted, req *seenRequest) bool {
				reply, user := correct(req, held)
				if req.n == 10 { // acknowledged, never answered
					if req.dup {
						t.Error("request 10 sent again although acknowledged")
						return false
					}
					close(seen10)
					if !covered {
						s.write(mqttwire.AppendPuback(nil, req.id))
						return true // and the connection drops
					}
					return false // the barrier's PUBACK drops it
				}
				s.answer(req, reply, false, user...)
				return false
			}
			s.onBarrier = func(s *scripted) {
				s.mu.Lock()
				s.conn.Close() // the drop, after the barrier's PUBACK
				s.mu.Unlock()
			}
			c := dial(t, startScripted(t, s), Options{Reconnect: 10 * time.Second, Timeout: 500 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan *Report, 1)
			go func() {
				rep, _ := c.Run(ctx, RunOptions{Requests: 20, InFlight: 1})
				done <- rep
			}()
			<-seen10
			if covered {
				if err := c.Barrier(ctx); err != nil {
					t.Fatal(err)
				}
			}
			rep := <-done
			if rep.Unanswered != 1 || rep.AckedLost != 1 || rep.Drops != 1 || rep.Err() == nil {
				t.Fatalf("%v\n%s", rep, rep.FirstProblem)
			}
			if want := map[bool]int{false: 1, true: 0}[covered]; rep.LostInCrash != want {
				t.Fatalf("lost in a crash %d, want %d", rep.LostInCrash, want)
			}
		})
	}
}
