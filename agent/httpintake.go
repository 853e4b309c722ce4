package agent

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

	"github.com/seed0e69bba5/faceagent/agent/config"
)

// httpIntake polls a back office API for tasks ([intake.http]), the field report's
// "schedule" loop (docs/design.md "The field report") done right: GET
// url?page=N&size=page_size from page 1 until a page comes back short, then wait interval
// and start again. A page is a JSON array of tasks, or an object {"tasks":[…]}. Pages go
// through the same intake as MQTT messages (the journal append before anything is
// considered taken; rejects dead-lettered); a task fetched again while still queued is a
// duplicate and stored once. Results are POSTed to results_url (a JSON array per batch) by
// the reporter, so the back office can stop listing finished tasks.
type httpIntake struct {
	cfg    *config.IntakeHTTP
	take   *taker
	client *http.Client
	log    *slog.Logger
	wg     sync.WaitGroup
	polled chan struct{} // poked after every full poll (tests)
}

func newHTTPIntake(c *config.IntakeHTTP, take *taker, log *slog.Logger) *httpIntake {
	return &httpIntake{cfg: c, take: take, client: &http.Client{Timeout: c.Timeout.Duration}, log: log, polled: make(chan struct{}, 1)}
}

func (h *httpIntake) start(ctx context.Context) {
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
			select {
			case h.polled <- struct{}{}:
			default:
			}
			timer.Reset(h.cfg.Interval.Duration)
		}
	}()
}

// poll reads pages until a short one; an error ends this round (the next comes after
// interval).
func (h *httpIntake) poll(ctx context.Context) {
	for page := 1; ctx.Err() == nil; page++ {
		tasks, n, err := h.fetch(ctx, page)
		if err != nil {
			h.log.Warn("polling the back office failed", "page", page, "err", err)
			return
		}
		if n > 0 {
			if err := h.take.accept(ctx, tasks); err != nil {
				h.log.Error("tasks from the back office not stored", "page", page, "err", err)
				return
			}
		}
		if n < h.cfg.PageSize {
			return
		}
	}
}

func (h *httpIntake) fetch(ctx context.Context, page int) (tasks []byte, n int, err error) {
	u, err := url.Parse(h.cfg.URL)
	if err != nil {
		return nil, 0, err
	}
	q := u.Query()
	q.Set("page", strconv.Itoa(page))
	q.Set("size", strconv.Itoa(h.cfg.PageSize))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if h.cfg.AuthValue != "" {
		req.Header.Set(h.cfg.AuthHeader, h.cfg.AuthValue)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(h.take.limits.MaxMessageSize)+1))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	if h.take.limits.MaxMessageSize > 0 && len(body) > h.take.limits.MaxMessageSize {
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

// resultPoster POSTs result batches to intake.http.results_url.
type resultPoster struct {
	url, header, value string
	client             *http.Client
}

func (p *resultPoster) post(ctx context.Context, results [][]byte) error {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, r := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r)
	}
	b.WriteByte(']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, &b)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.value != "" {
		req.Header.Set(p.header, p.value)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST results: %s", resp.Status)
	}
	return nil
}
