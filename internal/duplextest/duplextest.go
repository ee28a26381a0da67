// Package duplextest checks that a proxy relays an answer that begins while the request body is
// still streaming (full duplex). net/http's HTTP/1 server drains or closes a request body once
// the handler writes its response headers (golang/go#40747); a proxy that streams the body
// upstream, in front of an upstream that answers early (an event stream), then cuts the answer
// or, with a client that sends the rest of its body only after the headers, deadlocks.
package duplextest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// Upstream answers with an event stream at once, then reads the whole request body and ends
// with one event reporting how much it read and how the read ended.
func Upstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "event: done\ndata: {\"read\":%d,\"err\":%q}\n\n", n, fmt.Sprint(err))
	})
}

// Done is the event Upstream ends with once it has read n bytes to their end.
func Done(n int) string { return fmt.Sprintf(`{"read":%d,"err":"<nil>"}`, n) }

// Post sends 2*half bytes to url through client, the second half only once the response
// headers have arrived (or ctx is done: give it a deadline, as a guard against a hang), and
// returns the status and the whole answer.
func Post(ctx context.Context, client *http.Client, url string, half int) (int, []byte, error) {
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		return 0, nil, err
	}
	req.ContentLength = int64(2 * half)
	headers := make(chan struct{})
	go func() {
		chunk := bytes.Repeat([]byte("x"), half)
		if _, err := pw.Write(chunk); err != nil {
			return
		}
		select {
		case <-headers:
		case <-ctx.Done():
		}
		_, _ = pw.Write(chunk)
		pw.Close()
	}()
	resp, err := client.Do(req)
	close(headers)
	if err != nil {
		pw.CloseWithError(err)
		return 0, nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, got, err
}
