package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// pageHTML is the whole page: markup, one inline style and one inline script, no external
// asset. Its size is stated in docs/operations.md.
//
//go:embed page.html
var pageHTML []byte

// page is pageHTML ready to serve: gzip-compressed once, and the Content-Security-Policy
// that allows its inline style and script by their hashes and nothing else.
type page struct {
	plain, gz []byte
	csp       string
}

var (
	pageOnce sync.Once
	pageVal  *page
	pageErr  error
)

func loadPage() (*page, error) {
	pageOnce.Do(func() { pageVal, pageErr = buildPage(pageHTML) })
	return pageVal, pageErr
}

func buildPage(html []byte) (*page, error) {
	script, ok1 := between(html, "<script>", "</script>")
	style, ok2 := between(html, "<style>", "</style>")
	if !ok1 || !ok2 {
		return nil, errors.New("ui: the page must hold one <script> and one <style>")
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = zw.Write(html)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	csp := "default-src 'none'; script-src " + hashSource(script) + "; style-src " + hashSource(style) +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return &page{plain: html, gz: gz.Bytes(), csp: csp}, nil
}

// between returns what lies between the first open and the next close in b.
func between(b []byte, open, close string) ([]byte, bool) {
	_, rest, ok := bytes.Cut(b, []byte(open))
	if !ok {
		return nil, false
	}
	inner, _, ok := bytes.Cut(rest, []byte(close))
	return inner, ok
}

func hashSource(b []byte) string {
	sum := sha256.Sum256(b)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

func (u *UI) servePage(w http.ResponseWriter, r *http.Request) {
	p := u.page
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	body := p.plain
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = p.gz
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
