package idemhttp

import (
	"mime"
	"net/http"
	"strconv"
)

// headReserve is the room kept in front of a captured body for the
// envelope's head, so that the envelope is the capture buffer itself and
// the body is not copied to make it. A head that does not fit costs a copy.
const headReserve = 512

// The sizes of the chunks a body of unknown length is captured in: the
// first as large as the first Write, the others twice the last up to
// maxChunk, so that a large body is never copied to grow a buffer, and one
// written in pieces costs its size in chunks and once more joined.
const (
	firstChunk = 4 << 10
	maxChunk   = 64 << 10
)

// capture is the http.ResponseWriter a guarded handler writes to. It holds
// the response back until the record is complete, keeping the headers in
// the real writer's header map (nothing is sent before WriteHeader), and
// passes it through from the moment the handler flushes, writes a
// text/event-stream, or writes more body than maxBody: from then on what
// the handler writes goes out at once, and the body is still kept while it
// fits in maxBody.
type capture struct {
	w       http.ResponseWriter
	maxBody int

	status  int      // 0 until the handler's WriteHeader or first Write
	chunks  [][]byte // the body; chunks[0] starts with headReserve bytes
	size    int      // body bytes in chunks
	passing bool     // writing through to w
	omitted bool     // the body went over maxBody and is not kept
}

func newCapture(w http.ResponseWriter, maxBody int) *capture {
	return &capture{w: w, maxBody: maxBody}
}

func (c *capture) Header() http.Header { return c.w.Header() }

func (c *capture) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		c.w.WriteHeader(code) // informational: sent at once, never stored
		return
	}
	if c.status != 0 {
		return // superfluous, as net/http ignores it
	}
	c.status = code
	if n, err := strconv.Atoi(c.w.Header().Get("Content-Length")); err == nil && n > 0 && n <= c.maxBody {
		c.chunks = [][]byte{make([]byte, headReserve, headReserve+n)}
	}
	if isEventStream(c.w.Header().Get("Content-Type")) {
		c.pass()
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(c.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if !c.omitted && c.size+len(p) > c.maxBody {
		if !c.passing {
			c.pass() // what was captured goes out first
		}
		c.omitted, c.chunks, c.size = true, nil, 0
	}
	if !c.omitted {
		c.keep(p)
	}
	if c.passing {
		return c.w.Write(p)
	}
	return len(p), nil
}

// keep appends p to the body.
func (c *capture) keep(p []byte) {
	c.size += len(p)
	for len(p) > 0 {
		if len(c.chunks) == 0 {
			// A body written whole in one Write (a marshalled document)
			// fits its first chunk, and is never joined.
			c.chunks = [][]byte{make([]byte, headReserve, headReserve+max(firstChunk, len(p)))}
		}
		last := &c.chunks[len(c.chunks)-1]
		if room := cap(*last) - len(*last); room > 0 {
			n := min(room, len(p))
			*last = append(*last, p[:n]...)
			p = p[n:]
			continue
		}
		c.chunks = append(c.chunks, make([]byte, 0, min(2*cap(*last), maxChunk)))
	}
}

// Flush passes the response through from now on and flushes it.
func (c *capture) Flush() {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	c.pass()
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

// pass sends the status, the headers and the body captured so far, and
// makes later writes go straight out.
func (c *capture) pass() {
	if c.passing {
		return
	}
	c.passing = true
	c.sniff()
	c.w.WriteHeader(c.status)
	if c.size > 0 {
		_, _ = c.w.Write(c.body()) // a client that went away is the server's to notice
	}
}

// sniff sets the Content-Type that net/http would have sniffed from the
// body, so that the stored response and the one sent say the same.
func (c *capture) sniff() {
	h := c.w.Header()
	if _, ok := h["Content-Type"]; !ok && c.size > 0 && h.Get("Content-Encoding") == "" {
		body := c.body()
		h.Set("Content-Type", http.DetectContentType(body[:min(len(body), 512)]))
	}
}

// done ends the handler's response: a handler that wrote nothing answered
// 200 with an empty body.
func (c *capture) done() {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	c.sniff()
}

// body is the body kept so far, in one slice (after headReserve bytes of
// the first chunk).
func (c *capture) body() []byte {
	if len(c.chunks) == 0 {
		return nil
	}
	if len(c.chunks) > 1 {
		joined := make([]byte, headReserve, headReserve+c.size)
		for i, ch := range c.chunks {
			if i == 0 {
				ch = ch[headReserve:]
			}
			joined = append(joined, ch...)
		}
		c.chunks = [][]byte{joined}
	}
	return c.chunks[0][headReserve:]
}

// envelope is the record's result for the response: the head of status,
// the stored headers and whether the body was omitted, a newline, and the
// body. It is the capture buffer itself when the head fits in front.
func (c *capture) envelope(stored []string) []byte {
	var headers [][2]string
	h := c.w.Header()
	for _, name := range stored {
		for _, v := range h.Values(name) {
			headers = append(headers, [2]string{name, v})
		}
	}
	var body []byte
	if !c.omitted {
		body = c.body()
	}
	var scratch [headReserve]byte
	head := appendHead(scratch[:0], c.status, headers, c.omitted)
	if len(head) < headReserve && len(c.chunks) > 0 && !c.omitted {
		start := headReserve - len(head) - 1
		buf := c.chunks[0]
		copy(buf[start:], head)
		buf[headReserve-1] = '\n'
		return buf[start:]
	}
	out := make([]byte, 0, len(head)+1+len(body))
	out = append(append(out, head...), '\n')
	return append(out, body...)
}

// send writes the held response, unless it went out already.
func (c *capture) send() {
	if c.passing {
		return
	}
	body := c.body()
	if bodyAllowed(c.status) {
		c.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	c.w.WriteHeader(c.status)
	if len(body) > 0 {
		_, _ = c.w.Write(body)
	}
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && (status < 100 || status > 199)
}

// isEventStream reports whether a Content-Type is text/event-stream, a
// response that is read as it is written.
func isEventStream(contentType string) bool {
	if contentType == "" {
		return false
	}
	t, _, err := mime.ParseMediaType(contentType)
	return err == nil && t == "text/event-stream"
}
