package proxy

import (
	"errors"
	"io"
	"net/http"

	"github.com/compactd/compactd/internal/budget"
	"github.com/compactd/compactd/internal/fault"
)

// readBody reads a request body under the configured limit. On failure it has answered the
// client in d's envelope: 413 past the size limit, 408 past the read deadline, 503 past the
// in-flight budget, 400 for a body that could not be read. onBuf (nil: none) is handed a declared
// body's buffer before it is read; the function it returns is told how many bytes have arrived
// after each read (early forwarding).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, d dialect, onBuf func([]byte) func(int)) ([]byte, bool) {
	body, err := readAllSized(s.boundedBody(w, r), r.ContentLength, s.cfg.MaxBodyBytes, &s.bodies, onBuf, bodyLowat(r, s.cfg.MaxBodyBytes))
	if err == nil {
		return body, true
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeFault(w, d, bodyTooLarge(s.cfg.MaxBodyBytes))
	case errors.Is(err, errBodyReadTimeout):
		writeFault(w, d, bodyTimeout(s.cfg.BodyReadTimeout))
	case errors.Is(err, budget.ErrExceeded):
		budgetRefused(w, d, s.budget, s.metrics)
	default:
		writeFault(w, d, &fault.Fault{Message: "compactd could not read the request body: " + err.Error()})
	}
	return nil, false
}

// readAllSized reads a body in one allocation when its length is declared (agents send
// multi-megabyte bodies with Content-Length), instead of io.ReadAll's doubling growth.
//
// A declared body of poolMinBody or more is read into a buffer of pool (nil: none). onBuf, when
// set, is handed the buffer first, and its result the bytes read so far after each read.
//
// lw (nil: none) is the connection's receive low-water mark, raised while the body arrives
// (lowat.go) and put back before the function returns.
func readAllSized(r io.Reader, declared, limit int64, pool *bodyPool, onBuf func([]byte) func(int), lw *lowat) ([]byte, error) {
	if declared <= 0 || declared > limit {
		return io.ReadAll(r)
	}
	var buf []byte
	if pool != nil && declared >= poolMinBody {
		buf = pool.get(int(declared))
	} else {
		buf = make([]byte, declared, declared+1)
	}
	var progress func(int)
	if onBuf != nil {
		progress = onBuf(buf)
	}
	if progress == nil && lw == nil {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
	} else {
		defer lw.done()
		for n := 0; n < len(buf); {
			lw.before(len(buf) - n)
			m, err := r.Read(buf[n:])
			n += m
			if m > 0 && progress != nil {
				progress(n)
			}
			if err != nil && n < len(buf) {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
		}
	}
	// A body longer than declared is the server's to reject; read one more byte to be sure.
	var extra [1]byte
	if n, _ := r.Read(extra[:]); n > 0 {
		rest, err := io.ReadAll(r)
		return append(append(buf, extra[:n]...), rest...), err
	}
	return buf, nil
}
