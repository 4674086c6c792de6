package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// envelopeVersion is the value of "idem_http" in the envelopes this
// version writes and reads.
const envelopeVersion = 1

// Stored is a response as a record holds it.
type Stored struct {
	// Status is the response's status code.
	Status int
	// Headers are the stored headers, names in lowercase, in order.
	Headers [][2]string
	// Body is the body; empty when Omitted.
	Body []byte
	// Omitted is true when the body was over the bound and was not stored.
	Omitted bool
}

// appendHead appends the envelope's first line, without its newline:
// {"idem_http":1,"status":S,"headers":[[name,value],...]} with
// ,"omitted":true before the closing brace when the body was not stored.
// Header values are written as their bytes read as Latin-1, as Node and
// WSGI hold them, so that every language writes the same bytes.
func appendHead(b []byte, status int, headers [][2]string, omitted bool) []byte {
	b = append(b, `{"idem_http":`...)
	b = strconv.AppendInt(b, envelopeVersion, 10)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"headers":[`...)
	for i, h := range headers {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendLatin1String(b, h[0])
		b = append(b, ',')
		b = appendLatin1String(b, h[1])
		b = append(b, ']')
	}
	b = append(b, ']')
	if omitted {
		b = append(b, `,"omitted":true`...)
	}
	return append(b, '}')
}

// Encode returns the envelope of s: its head, a newline, and its body
// unless it was omitted.
func (s Stored) Encode() []byte {
	b := appendHead(make([]byte, 0, 64+len(s.Body)), s.Status, s.Headers, s.Omitted)
	b = append(b, '\n')
	if !s.Omitted {
		b = append(b, s.Body...)
	}
	return b
}

// appendLatin1String writes s as a JSON string with the escapes that
// JavaScript's JSON.stringify and Python's json.dumps (ensure_ascii off)
// write: \" \\ \b \f \n \r \t, \u00xx for other control characters, and
// each byte at or above 0x80 as the character of that code point.
func appendLatin1String(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			switch {
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			case c >= 0x80:
				b = utf8.AppendRune(b, rune(c))
			default:
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

const lowerHex = "0123456789abcdef"

// errUnreadable wraps why a record's result is not an envelope.
var errUnreadable = errors.New("not a stored response")

// Decode reads an envelope. The body is a slice of envelope, not a copy.
func Decode(envelope []byte) (Stored, error) {
	line, body, ok := bytes.Cut(envelope, []byte{'\n'})
	if !ok {
		return Stored{}, fmt.Errorf("%w: no newline after its first line", errUnreadable)
	}
	var head struct {
		Version *int        `json:"idem_http"`
		Status  int         `json:"status"`
		Headers [][]*string `json:"headers"`
		Omitted bool        `json:"omitted"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return Stored{}, fmt.Errorf("%w: its first line: %v", errUnreadable, err)
	}
	switch {
	case head.Version == nil:
		return Stored{}, fmt.Errorf("%w: its first line has no idem_http", errUnreadable)
	case *head.Version != envelopeVersion:
		return Stored{}, fmt.Errorf("%w: it is version %d of the format; this version reads %d", errUnreadable, *head.Version, envelopeVersion)
	case head.Status < 200 || head.Status > 599:
		return Stored{}, fmt.Errorf("%w: status %d is not a final status (200 to 599)", errUnreadable, head.Status)
	case head.Omitted && len(body) > 0:
		return Stored{}, fmt.Errorf("%w: a body follows a head that says it was omitted", errUnreadable)
	}
	s := Stored{Status: head.Status, Omitted: head.Omitted, Body: body}
	for _, h := range head.Headers {
		if len(h) != 2 || h[0] == nil || h[1] == nil {
			return Stored{}, fmt.Errorf("%w: a header is not a [name, value] pair of strings", errUnreadable)
		}
		name, err := fromLatin1(*h[0])
		if err != nil {
			return Stored{}, err
		}
		value, err := fromLatin1(*h[1])
		if err != nil {
			return Stored{}, err
		}
		s.Headers = append(s.Headers, [2]string{name, value})
	}
	return s, nil
}

// fromLatin1 turns the characters of a header as the envelope holds it
// back into the header's bytes.
func fromLatin1(s string) (string, error) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return "", fmt.Errorf("%w: a header holds %q, which is not Latin-1", errUnreadable, r)
		}
		b = append(b, byte(r))
	}
	return string(b), nil
}
