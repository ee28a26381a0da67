package fakeupstream

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/compactd/compactd/internal/sse"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start serves a new Server for the test's lifetime.
func start(t testing.TB, o Options) (*Server, string) {
	t.Helper()
	s := New(o)
	base, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, base
}

// httpClient does not keep idle connections, so nothing lingers for goleak after a test.
func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// post sends body with the given extra headers and returns status, headers and the whole body.
func post(t testing.TB, url, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// eventDatas reads an SSE body with compactd's reader: the data of each whole event that has
// data, and whether the body ended in the middle of an event.
func eventDatas(stream []byte) (datas [][]byte, partial bool) {
	rd := sse.NewReader(bytes.NewReader(stream))
	for {
		ev, err := rd.Next()
		if err != nil {
			return datas, partial
		}
		if !ev.Terminated {
			partial = true
		} else if ev.HasData() {
			datas = append(datas, append([]byte(nil), ev.Data...))
		}
	}
}
