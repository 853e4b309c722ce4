package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

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
