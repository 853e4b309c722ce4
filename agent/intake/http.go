package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// HTTPOptions configure the HTTP pull of tasks ([intake.http]).
type HTTPOptions struct {
	// URL lists open tasks: GET URL?page=N&size=PageSize.
	URL      string
	PageSize int
	// Interval is the wait between two rounds of polling; Timeout bounds one request.
	Interval, Timeout time.Duration
	// AuthHeader carries AuthValue on every request, when AuthValue is set.
	AuthHeader, AuthValue string
	// Logger receives failed polls. Default: discard.
	Logger *slog.Logger
}

// HTTPPull polls a back office API for tasks: GET url?page=N&size=page_size from page 1
// until a page comes back short, then waits interval and starts again. A page is a JSON
// array of tasks, or an object {"tasks":[…]}. Pages go through the Taker like MQTT
// messages (the journal append before anything is considered taken; rejects
// dead-lettered); a task fetched again while still queued is a duplicate and stored once.
type HTTPPull struct {
	o      HTTPOptions
	take   *Taker
	client *http.Client
	log    *slog.Logger
	wg     sync.WaitGroup
}

// NewHTTPPull prepares the pull of tasks into take; Start starts it.
func NewHTTPPull(o HTTPOptions, take *Taker) *HTTPPull {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &HTTPPull{o: o, take: take, client: &http.Client{Timeout: o.Timeout}, log: log}
}

// Start polls on its own goroutine until ctx is done; Wait waits for it to end.
func (h *HTTPPull) Start(ctx context.Context) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			h.poll(ctx)
			timer.Reset(h.o.Interval)
		}
	}()
}

// Wait returns once the polling goroutine Start began has ended.
func (h *HTTPPull) Wait() { h.wg.Wait() }

// poll reads pages until a short one; an error ends this round (the next comes after
// interval).
func (h *HTTPPull) poll(ctx context.Context) {
	for page := 1; ctx.Err() == nil; page++ {
		tasks, n, err := h.fetch(ctx, page)
		if err != nil {
			h.log.Warn("polling the back office failed", "page", page, "err", err)
			return
		}
		if n > 0 {
			if err := h.take.Accept(ctx, tasks); err != nil {
				h.log.Error("tasks from the back office not stored", "page", page, "err", err)
				return
			}
		}
		if n < h.o.PageSize {
			return
		}
	}
}

func (h *HTTPPull) fetch(ctx context.Context, page int) (tasks []byte, n int, err error) {
	u, err := url.Parse(h.o.URL)
	if err != nil {
		return nil, 0, err
	}
	q := u.Query()
	q.Set("page", strconv.Itoa(page))
	q.Set("size", strconv.Itoa(h.o.PageSize))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if h.o.AuthValue != "" {
		req.Header.Set(h.o.AuthHeader, h.o.AuthValue)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	limit := h.take.MaxMessageSize()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	if limit > 0 && len(body) > limit {
		return nil, 0, fmt.Errorf("page %d is larger than intake.max_message_size", page)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var wrapped struct {
			Tasks json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(trimmed, &wrapped); err != nil || len(wrapped.Tasks) == 0 {
			return nil, 0, fmt.Errorf("page %d: want a JSON array of tasks or {\"tasks\":[…]}", page)
		}
		trimmed = wrapped.Tasks
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(trimmed, &elems); err != nil {
		return nil, 0, fmt.Errorf("page %d: want a JSON array of tasks: %v", page, err)
	}
	return trimmed, len(elems), nil
}
