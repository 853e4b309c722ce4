package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// HTTPPoster is a Poster that POSTs each batch of results as one JSON array to URL, with
// Header: Value when Value is set. Any status but 2xx is an error: the batch is posted
// again, and not marked reported meanwhile.
type HTTPPoster struct {
	URL, Header, Value string
	Client             *http.Client
}

// PostResults implements Poster.
func (p *HTTPPoster) PostResults(ctx context.Context, results [][]byte) error {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, r := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r)
	}
	b.WriteByte(']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, &b)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.Value != "" {
		req.Header.Set(p.Header, p.Value)
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16)) // drained so the connection is reused
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST results: %s", resp.Status)
	}
	return nil
}
