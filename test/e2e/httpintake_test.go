package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// fakeBackOffice lists open tasks in pages and takes results; a task with a result is no
// longer listed, as the field report's back office API does (docs/design.md "The field report").
type fakeBackOffice struct {
	mu      sync.Mutex
	open    []wire.Task
	results map[string]wire.Result
	auth    []string
	pages   []string
	done    chan struct{}
	want    int
}

func (f *fakeBackOffice) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("X-Api-Key"))
	switch r.Method {
	case http.MethodGet:
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		f.pages = append(f.pages, r.URL.RawQuery)
		var list []wire.Task
		for _, t := range f.open {
			if _, finished := f.results[t.TaskID]; !finished {
				list = append(list, t)
			}
		}
		from := min((page-1)*size, len(list))
		to := min(from+size, len(list))
		if page%2 == 0 { // both page shapes: an array, and {"tasks":[…]}
			json.NewEncoder(w).Encode(map[string]any{"tasks": append([]wire.Task{}, list[from:to]...)})
		} else {
			json.NewEncoder(w).Encode(append([]wire.Task{}, list[from:to]...))
		}
	case http.MethodPost:
		var rs []wire.Result
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &rs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, res := range rs {
			f.results[res.TaskID] = res
		}
		if len(f.results) == f.want {
			close(f.done)
			f.want = -1
		}
	}
}

func TestHTTPIntake(t *testing.T) {
	bo := &fakeBackOffice{results: map[string]wire.Result{}, done: make(chan struct{}), want: 7}
	for i := range 7 {
		bo.open = append(bo.open, wire.Task{TaskID: fmt.Sprintf("h-%d", i), DeviceID: "h1", Op: "AddPerson",
			Person: intakePerson(i)})
	}
	srv := httptest.NewServer(bo)
	defer srv.Close()

	src := fmt.Sprintf(`[agent]
gateway_id = "gw-h"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[intake.http]
url = %q
results_url = %q
page_size = 3
interval = "100ms"
auth_header = "X-Api-Key"
auth_value_env = "BO_KEY"
[[devices]]
id = "h1"
`, t.TempDir(), srv.URL+"/tasks", srv.URL+"/results")
	cfg, err := config.Parse("h.toml", []byte(src), &config.Options{LookupEnv: func(k string) (string, bool) {
		return "k-123", k == "BO_KEY"
	}})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startAgent(t, cfg)
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"h1"}, sim.Options{Seed: 5, HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	select {
	case <-bo.done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every result was posted back")
	}
	bo.mu.Lock()
	defer bo.mu.Unlock()
	for id, r := range bo.results {
		if r.Status != wire.Succeeded {
			t.Errorf("%s: %+v", id, r)
		}
	}
	for _, a := range bo.auth {
		if a != "k-123" {
			t.Fatalf("auth header %q", a)
		}
	}
	if bo.pages[0] != "page=1&size=3" || bo.pages[1] != "page=2&size=3" || bo.pages[2] != "page=3&size=3" {
		t.Errorf("pages requested: %v", bo.pages[:3])
	}
	if got := len(fleet.Terminal("h1").Persons()); got != 7 {
		t.Errorf("terminal has %d persons, want 7", got)
	}
}

func intakePerson(i int) face.Person { return face.Person{ID: fmt.Sprint(500 + i), Name: "H"} }
