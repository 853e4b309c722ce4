package report

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The batch arrives as one JSON array with the configured header; a refusal is an error.
func TestHTTPPosterPostsOneArray(t *testing.T) {
	var got, auth string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, auth = string(b), r.Header.Get("X-Key")
		w.WriteHeader(status)
	}))
	defer srv.Close()
	p := &HTTPPoster{URL: srv.URL, Header: "X-Key", Value: "k", Client: srv.Client()}
	if err := p.PostResults(context.Background(), [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}); err != nil {
		t.Fatal(err)
	}
	if got != `[{"a":1},{"b":2}]` || auth != "k" {
		t.Fatalf("posted %q with X-Key %q", got, auth)
	}
	status = http.StatusServiceUnavailable
	if err := p.PostResults(context.Background(), [][]byte{[]byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a 503: %v, want an error naming it", err)
	}
}
