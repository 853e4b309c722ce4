package ui

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a UI over a state the test changes, served by an httptest server.
type fixture struct {
	u      *UI
	srv    *httptest.Server
	mu     sync.Mutex
	st     State
	builds atomic.Int32
	acts   []string
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{st: State{Gateway: "gw", Version: "t", Actions: true, Health: Health{OK: true, Upstream: "embedded"},
		Terminals: []Terminal{{ID: "a"}, {ID: "b"}}}}
	o.State = func() State {
		f.builds.Add(1)
		f.mu.Lock()
		defer f.mu.Unlock()
		st := f.st
		st.Terminals = append([]Terminal(nil), f.st.Terminals...)
		return st
	}
	if o.Control == nil {
		o.Control = func(action, device string) (string, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.acts = append(f.acts, action+" "+device)
			if device == "nope" {
				return "", errors.New(`unknown device "nope"`)
			}
			return action + " done", nil
		}
	}
	u, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.u = u
	ctx, cancel := context.WithCancel(context.Background())
	u.Start(ctx)
	f.srv = httptest.NewServer(u.Handler())
	t.Cleanup(func() {
		u.Close()
		f.srv.Close()
		cancel()
		u.Wait()
	})
	return f
}

func (f *fixture) set(change func(*State)) {
	f.mu.Lock()
	change(&f.st)
	f.mu.Unlock()
	f.u.Notify()
}

func slogTo(b *bytes.Buffer, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{b, mu}, nil))
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

type users map[string]string

func (u users) CheckPassword(user, password string) bool {
	p, ok := u[user]
	return ok && p == password
}

func (f *fixture) action(t *testing.T, auth, body string) (int, actionAnswer) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/api/action", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a actionAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// Actions need the token or a user's password; without, with wrong ones, or with none
// configured, they are refused and nothing runs.
func TestActionAuth(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	f := newFixture(t, Options{Token: "s3cret-token", Users: users{"ops": "pw"},
		Log: slogTo(&logs, &logMu)})
	pause := `{"action":"pause","device":"a"}`
	for _, c := range []struct {
		name, auth string
		status     int
	}{
		{"none", "", 401},
		{"wrong token", "Bearer s3cret-toke", 401},
		{"longer token", "Bearer s3cret-token2", 401},
		{"token as password", basic("ops", "s3cret-token"), 401},
		{"unknown user", basic("root", "pw"), 401},
		{"garbage basic", "Basic !!!", 401},
		{"other scheme", "Digest x", 401},
		{"cookie-less empty bearer", "Bearer ", 401},
	} {
		if status, a := f.action(t, c.auth, pause); status != c.status || a.OK || a.Error == "" {
			t.Errorf("%s: %d %+v, want %d", c.name, status, a, c.status)
		}
	}
	if len(f.acts) != 0 {
		t.Fatalf("refused requests ran actions: %v", f.acts)
	}
	if status, a := f.action(t, "Bearer s3cret-token", pause); status != 200 || !a.OK || a.Result != "pause done" {
		t.Fatalf("token: %d %+v", status, a)
	}
	if status, a := f.action(t, basic("ops", "pw"), `{"action":"retry-failed"}`); status != 200 || !a.OK {
		t.Fatalf("basic: %d %+v", status, a)
	}
	if status, a := f.action(t, "Bearer s3cret-token", `{"action":"pause","device":"nope"}`); status != 409 || a.Error != `unknown device "nope"` {
		t.Fatalf("refused action: %d %+v", status, a)
	}
	if status, _ := f.action(t, "Bearer s3cret-token", `{"action":"drain"}`); status != 400 {
		t.Fatalf("an action the page does not offer: %d", status)
	}
	if status, _ := f.action(t, "Bearer s3cret-token", `{"action":"pause","device":"`+strings.Repeat("x", MaxActionBody)+`"}`); status != 400 {
		t.Fatalf("a body over MaxActionBody: %d", status)
	}
	if want := []string{"pause a", "retry-failed ", "pause nope"}; strings.Join(f.acts, "|") != strings.Join(want, "|") {
		t.Fatalf("actions run: %q, want %q", f.acts, want)
	}
	resp, err := f.srv.Client().Get(f.srv.URL + "/api/action")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /api/action: %d", resp.StatusCode)
	}
	logMu.Lock()
	text := logs.String()
	logMu.Unlock()
	for _, want := range []string{`msg="operator action" who=token action=pause device=a result="pause done"`,
		`msg="operator action" who=ops action=retry-failed`, `msg="operator action failed" who=token action=pause device=nope`} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, "s3cret-token") || strings.Contains(text, "pw\"") {
		t.Errorf("the log shows a credential:\n%s", text)
	}

	off := newFixture(t, Options{})
	if status, a := off.action(t, "Bearer x", pause); status != 403 || a.Error != errActionsOff.Error() {
		t.Fatalf("no credentials configured: %d %+v", status, a)
	}
}

// The token is compared through its SHA-256 in constant time: the comparison never sees
// the lengths, and a token with a trailing space or a different case is wrong.
func TestTokenCompare(t *testing.T) {
	a := newAuthorizer("Token", nil)
	for _, c := range []struct {
		header string
		who    string
	}{{"Bearer Token", "token"}, {"bearer Token", "token"}, {"Bearer token", ""}, {"Bearer Tok", ""}, {"Bearer TokenToken", ""}} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Authorization", c.header)
		if who, err := a.authorize(r); who != c.who || (err == nil) != (c.who != "") {
			t.Errorf("%q: %q %v", c.header, who, err)
		}
	}
	if a.users != nil {
		t.Fatal("no users")
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", basic("x", "Token"))
	if _, err := a.authorize(r); err != errWrong {
		t.Fatalf("Basic without users: %v", err)
	}
}

// One password check at a time: a second one while the first runs is answered 429.
func TestBasicOneAtATime(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	slow := userFunc(func(user, password string) bool { close(entered); <-release; return true })
	a := newAuthorizer("", slow)
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", basic("ops", "pw"))
	done := make(chan string)
	go func() { who, _ := a.authorize(r); done <- who }()
	<-entered
	if _, err := a.authorize(r); err != errBusy || authStatus(err) != http.StatusTooManyRequests {
		t.Fatalf("a second check while one runs: %v", err)
	}
	close(release)
	if who := <-done; who != "ops" {
		t.Fatalf("who = %q", who)
	}
}

type userFunc func(user, password string) bool

func (f userFunc) CheckPassword(user, password string) bool { return f(user, password) }

// The page sets every text with textContent; the JSON it reads escapes markup; a
// deadletter's reason with a script element comes out as the same text.
func TestEscaping(t *testing.T) {
	html := string(pageHTML)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute(\"on"} {
		if strings.Contains(html, sink) {
			t.Errorf("page.html uses %s: every text must go in with textContent", sink)
		}
	}
	f := newFixture(t, Options{})
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	f.u.DeadLettered([][]byte{[]byte(`{"reason":"task 0: ` + strings.ReplaceAll(evil, `"`, `\"`) + `","payload":{"taskId":"</script>"}}`),
		[]byte("not json <b>")})
	f.set(func(s *State) { s.DeadLetters = f.u.RecentDeadLetters(); s.Terminals[0].LastError = evil })
	resp, err := f.srv.Client().Get(f.srv.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(body, []byte("<")) || bytes.Contains(body, []byte(">")) {
		t.Fatalf("/api/state carries raw markup: %s", body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers: %v", resp.Header)
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.DeadLetters) != 2 || st.DeadLetters[1].Reason != "task 0: "+evil || st.DeadLetters[1].Payload != `{"taskId":"</script>"}` ||
		st.DeadLetters[0].Payload != "not json <b>" || st.Terminals[0].LastError != evil {
		t.Fatalf("texts changed on the way: %+v", st)
	}
}

// The recent deadletters are bounded in count and size, newest first.
func TestDeadLettersBounded(t *testing.T) {
	var r recentDeadLetters
	for i := range MaxDeadLetters + 7 {
		r.add([][]byte{[]byte(`{"reason":"r` + string(rune('a'+i%26)) + `","payload":"` + strings.Repeat("é", MaxDeadLetterPayload) + `"}`)}, time.UnixMilli(int64(i)))
	}
	l := r.list()
	if len(l) != MaxDeadLetters || l[0].At != MaxDeadLetters+6 || l[len(l)-1].At != 7 {
		t.Fatalf("%d kept, newest %d, oldest %d", len(l), l[0].At, l[len(l)-1].At)
	}
	if p := l[0].Payload; len(p) > MaxDeadLetterPayload+len("…") || !strings.HasSuffix(p, "é…") {
		t.Fatalf("payload clipped to %d bytes: %q…", len(p), p[:20])
	}
}

// The page: gzip when accepted, plain otherwise, a CSP that allows its own inline script
// and style by hash and nothing else.
func TestPageHeaders(t *testing.T) {
	f := newFixture(t, Options{})
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, gz := range []bool{true, false} {
		req, _ := http.NewRequest("GET", f.srv.URL+"/", nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip, deflate")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := raw
		if gz {
			if resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatal("gzip accepted, not sent")
			}
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(zr)
			if len(raw) >= len(body)/2 {
				t.Errorf("gzip: %d bytes of %d", len(raw), len(body))
			}
		} else if resp.Header.Get("Content-Encoding") != "" {
			t.Fatal("gzip sent unasked")
		}
		if !bytes.Equal(body, pageHTML) {
			t.Fatal("the page served is not page.html")
		}
		csp := resp.Header.Get("Content-Security-Policy")
		script, _ := between(pageHTML, "<script>", "</script>")
		if !strings.HasPrefix(csp, "default-src 'none'; script-src "+hashSource(script)+"; style-src 'sha256-") ||
			strings.Contains(csp, "unsafe") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("CSP = %s", csp)
		}
	}
	if !regexp.MustCompile(`^<!doctype html>`).Match(pageHTML) || strings.Count(string(pageHTML), "<script") != 1 {
		t.Fatal("page.html: one inline script, no external one")
	}
}

// sse reads one stream's events.
type sse struct {
	resp *http.Response
	rd   *bufio.Reader
}

func openSSE(t *testing.T, f *fixture) *sse {
	t.Helper()
	resp, err := f.srv.Client().Get(f.srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("/api/events: %d %v", resp.StatusCode, resp.Header)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{resp: resp, rd: bufio.NewReader(resp.Body)}
}

// next returns the next event's data (a state), or "" for a comment.
func (s *sse) next(t *testing.T) (State, bool) {
	t.Helper()
	var data string
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && data != "":
			var st State
			if err := json.Unmarshal([]byte(data), &st); err != nil {
				t.Fatal(err)
			}
			return st, true
		case line == "":
		case strings.HasPrefix(line, ":"):
			if _, err := s.rd.ReadString('\n'); err != nil { // the blank line after it
				t.Fatal(err)
			}
			return State{}, false
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

// A stream gets the state at once and each change; changes in a burst are coalesced; an
// idle stream gets keep-alive comments; a terminal going offline is sent at its moment,
// without a change notification.
func TestEventsLive(t *testing.T) {
	f := newFixture(t, Options{KeepAlive: time.Second, MinInterval: 50 * time.Millisecond})
	s := openSSE(t, f)
	if st, ok := s.next(t); !ok || len(st.Terminals) != 2 {
		t.Fatalf("first event: %+v", st)
	}
	for i := range 50 {
		f.set(func(st *State) { st.Terminals[0].Queued = i + 1 })
	}
	var got State
	for got.Terminals == nil || got.Terminals[0].Queued != 50 {
		st, ok := s.next(t)
		if ok {
			got = st
		}
	}
	builds := f.builds.Load()
	if builds > 25 {
		t.Errorf("50 changes in a burst made %d states: not coalesced", builds)
	}
	// Idle: only keep-alive comments.
	if _, ok := s.next(t); ok {
		t.Fatal("a state without a change")
	}
	// A terminal whose online time runs out: the hub sends the state then.
	until := time.Now().Add(200 * time.Millisecond)
	f.set(func(st *State) { st.Terminals[1].Online, st.Terminals[1].OnlineUntil = true, until.UnixMilli() })
	for {
		st, ok := s.next(t)
		if ok && st.Terminals[1].Online {
			break
		}
	}
	f.mu.Lock()
	f.st.Terminals[1].Online, f.st.Terminals[1].OnlineUntil = false, 0 // as the outbox would say after until, unannounced
	f.mu.Unlock()
	for {
		st, ok := s.next(t)
		if ok && !st.Terminals[1].Online {
			if d := time.Since(until); d > 250*time.Millisecond {
				t.Fatalf("offline sent %v after the moment", d)
			}
			break
		}
	}
}

// With no stream open, changes build nothing.
func TestIdleBuildsNothing(t *testing.T) {
	f := newFixture(t, Options{MinInterval: time.Millisecond})
	for i := range int64(20) {
		f.u.Notify()
		deadline := time.Now().Add(5 * time.Second)
		for f.u.rounds.Load() <= i {
			if time.Now().After(deadline) {
				t.Fatal("the hub never took the notification")
			}
			time.Sleep(time.Millisecond) // polling a counter, not standing in for an event
		}
	}
	if n := f.builds.Load(); n != 0 {
		t.Fatalf("%d states built: notifications with no stream open must build none", n)
	}
}

// At most MaxClients streams; one more is refused with 503 and counted; Close ends them.
func TestEventsMaxClients(t *testing.T) {
	f := newFixture(t, Options{MaxClients: 2})
	a, b := openSSE(t, f), openSSE(t, f)
	a.next(t)
	b.next(t)
	resp, err := f.srv.Client().Get(f.srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third stream: %d", resp.StatusCode)
	}
	f.u.Close()
	if _, err := io.ReadAll(a.resp.Body); err != nil {
		t.Fatalf("Close must end the stream cleanly: %v", err)
	}
}

// A client that stops reading is dropped after WriteTimeout, and its slot is free again;
// it holds at most one pending state meanwhile.
func TestSlowClientDropped(t *testing.T) {
	f := newFixture(t, Options{MaxClients: 1, WriteTimeout: 200 * time.Millisecond, MinInterval: time.Millisecond})
	big := strings.Repeat("x", 64<<10)
	f.set(func(s *State) { s.Terminals[0].LastError = big })
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	if _, err := conn.Write([]byte("GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Never read: the kernel's buffers fill, a write blocks past WriteTimeout.
	deadline := time.Now().Add(20 * time.Second)
	for f.u.clientCount() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream never joined")
		}
		time.Sleep(time.Millisecond) // polling a count, not standing in for an event
	}
	for i := 0; f.u.clientCount() == 1; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the slow client was never dropped")
		}
		f.set(func(s *State) { s.Terminals[0].Queued = i })
		time.Sleep(5 * time.Millisecond) // changes to send, not standing in for an event
	}
	s := openSSE(t, f) // the slot is free again
	s.next(t)
}

// The page's size, uncompressed and as served gzip-compressed, stays within its budget
// (MaxPageBytes, MaxPageGzipBytes: it travels to a browser over a gateway's uplink, and
// it is in the ARM binary), and docs/operations.md states both figures as they are: a
// change of the page fails here until the document says its new size.
//
//	go test -run TestPageSize -v ./agent/ui/
func TestPageSize(t *testing.T) {
	const MaxPageBytes, MaxPageGzipBytes = 20_000, 7_000
	p, err := loadPage()
	if err != nil {
		t.Fatal(err)
	}
	plain, gz := len(p.plain), len(p.gz)
	t.Logf("page.html: %d bytes, %d bytes gzip-compressed", plain, gz)
	if plain > MaxPageBytes || gz > MaxPageGzipBytes {
		t.Fatalf("page.html: %d bytes (budget %d), %d gzip-compressed (budget %d)", plain, MaxPageBytes, gz, MaxPageGzipBytes)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s bytes, %s bytes gzip-compressed", thousands(plain), thousands(gz))
	if !strings.Contains(string(doc), want) {
		t.Fatalf("docs/operations.md does not state the page's size: want %q in its page section", want)
	}
}

// thousands writes n with commas between groups of three digits, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
