package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactd/compactd/internal/jsonx"
)

// LineTransport is the stdio transport of `compactd mcp`: newline-delimited JSON-RPC 2.0, as the
// SDK's mcp.StdioTransport speaks it, except that one bad frame does not end the session. The
// SDK's transport decodes the stream with a json.Decoder and closes the connection on the first
// value it cannot decode (not JSON, nested past encoding/json's limit, over its line limit, or
// JSON that is no JSON-RPC message), so one stray line — a debug print on the agent's side, a
// truncated write — took every tool away for the rest of the agent's session.
//
// Here each line is checked before the SDK sees it: bounded in size (MaxLineBytes; the rest of
// an oversized line is read and dropped, never held), valid UTF-8 JSON at most jsonx.MaxDepth
// levels deep (jsonx.Valid, one linear pass), and one JSON-RPC 2.0 message. A line that fails is
// answered with a JSON-RPC error with id null and reading goes on with the next line:
//
//   - -32700 Parse error: not JSON, invalid UTF-8, nested too deeply, or over the line limit;
//   - -32600 Invalid Request: JSON that is not one JSON-RPC 2.0 request, notification or
//     response (not an object, a wrong "jsonrpc" version, an id that is neither a string nor a
//     number, a batch).
//
// Batches (JSON arrays of messages) are refused: MCP removed them in protocol version
// 2025-06-18, and the SDK itself ends the connection on one from a client that negotiated a
// later version. Blank lines are skipped.
type LineTransport struct {
	In  io.ReadCloser
	Out io.Writer
	// MaxLineBytes bounds one frame (default mcp.DefaultMaxLineLength, 16 MiB, the SDK's).
	MaxLineBytes int
}

// Connect implements mcp.Transport.
func (t *LineTransport) Connect(context.Context) (mcp.Connection, error) {
	limit := t.MaxLineBytes
	if limit <= 0 {
		limit = mcp.DefaultMaxLineLength
	}
	c := &lineConn{in: t.In, out: t.Out, incoming: make(chan readResult), closed: make(chan struct{})}
	go c.readLoop(limit)
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error // ends the session: the input ended or failed
}

// lineConn is a LineTransport connection.
type lineConn struct {
	in       io.ReadCloser
	out      io.Writer
	writeMu  sync.Mutex // one frame at a time on out
	incoming chan readResult

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

func (c *lineConn) SessionID() string { return "" }

// readLoop reads frames until the input ends, answering bad ones itself. Like the SDK's, it
// runs in its own goroutine so that Close unblocks Read; a Read of the input that never
// returns (stdin cannot always be interrupted) leaves this goroutine behind, as the SDK's does.
func (c *lineConn) readLoop(limit int) {
	r := bufio.NewReaderSize(c.in, 64<<10)
	for {
		// A new buffer per line: the message handed on may keep slices of it.
		line, over, err := readLine(r, nil, limit)
		if len(line) > 0 || over {
			msg, code, reason := checkFrame(line, over, limit)
			switch {
			case msg != nil:
				select {
				case c.incoming <- readResult{msg: msg}:
				case <-c.closed:
					return
				}
			case code != 0:
				if werr := c.writeError(code, reason); werr != nil {
					err = werr
				}
			}
		}
		if err != nil {
			select {
			case c.incoming <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// readLine reads one line into buf (without its line end) and returns it; a line longer than
// limit is read to its end and dropped (over set, nothing kept). err is the reader's error,
// io.EOF at the end of the input (a last line without a newline is still returned).
func readLine(r *bufio.Reader, buf []byte, limit int) (line []byte, over bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !over {
			if len(buf)+len(chunk) > limit+2 { // +2: the line end is not the frame's
				over, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if !over && len(buf) > limit {
			over, buf = true, buf[:0]
		}
		return buf, over, err
	}
}

// checkFrame decides one line: a message to hand the SDK, nothing (a blank line, code 0), or
// the JSON-RPC error code to answer and why.
func checkFrame(line []byte, over bool, limit int) (msg jsonrpc.Message, code int64, reason string) {
	if over {
		return nil, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: the frame exceeds %d bytes; it was dropped", limit)
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, 0, ""
	}
	if err := jsonx.Valid(line); err != nil {
		switch {
		case errors.Is(err, jsonx.ErrTooDeep):
			return nil, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: the frame nests more than %d levels deep", jsonx.MaxDepth)
		case errors.Is(err, jsonx.ErrInvalidUTF8):
			return nil, jsonrpc.CodeParseError, "Parse error: the frame is not valid UTF-8"
		}
		return nil, jsonrpc.CodeParseError, "Parse error: the frame is not one JSON value (one JSON-RPC message per line)"
	}
	switch line[0] {
	case '{':
	case '[':
		return nil, jsonrpc.CodeInvalidRequest, "Invalid Request: JSON-RPC batches are not supported (MCP removed them in 2025-06-18); send one message per line"
	default:
		return nil, jsonrpc.CodeInvalidRequest, "Invalid Request: a JSON-RPC message is a JSON object"
	}
	m, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return nil, jsonrpc.CodeInvalidRequest, `Invalid Request: not a JSON-RPC 2.0 message ("jsonrpc":"2.0", a string or number "id", and a "method", or a "result" or "error")`
	}
	return m, 0, ""
}

// writeError answers a bad frame: a JSON-RPC error response with id null (the frame's id, if
// any, could not be trusted).
func (c *lineConn) writeError(code int64, message string) error {
	b, err := json.Marshal(struct {
		JSONRPC string        `json:"jsonrpc"`
		ID      any           `json:"id"`
		Error   jsonrpc.Error `json:"error"`
	}{JSONRPC: "2.0", ID: nil, Error: jsonrpc.Error{Code: code, Message: message}})
	if err != nil {
		return err
	}
	return c.writeFrame(b)
}

func (c *lineConn) writeFrame(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	_, err := c.out.Write(append(b, '\n'))
	return err
}

// Read implements mcp.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-c.incoming:
		return r.msg, r.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// Write implements mcp.Connection.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a JSON-RPC message: %w", err)
	}
	return c.writeFrame(b)
}

// Close implements mcp.Connection.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed) // not under writeMu: a write blocked on a full pipe must not hold up Close
		c.closeErr = c.in.Close()
	})
	return c.closeErr
}
