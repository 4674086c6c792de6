package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/limits"
)

// ParseKey reads the value of the Idempotency-Key header: an RFC 8941 Item
// whose bare item is a String ("8e03978e-40d5"), parameters allowed and
// ignored. Several field lines are one value joined with ", " (which is
// then a list, not an item, and so malformed). An empty string is
// malformed too: idem's keys are at least one byte.
func ParseKey(value string) (string, error) {
	p := sfParser{s: strings.Trim(value, " \t")}
	if p.s == "" {
		return "", errors.New("the value is empty")
	}
	if p.peek() != '"' {
		return "", errors.New(`the value must be a quoted string (RFC 8941), like "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	}
	key, err := p.string()
	if err != nil {
		return "", err
	}
	if err := p.parameters(); err != nil {
		return "", err
	}
	if p.i != len(p.s) {
		return "", errors.New("the value has more than one quoted string (RFC 8941): one key per request")
	}
	if key == "" {
		return "", errors.New("the key is empty; it must be at least 1 character")
	}
	return key, nil
}

// sfParser parses the parts of an RFC 8941 Item that ParseKey needs.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// string parses an sf-string: printable ASCII between double quotes, with
// \" and \\ its only escapes.
func (p *sfParser) string() (string, error) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", errors.New(`a backslash in the string escapes only " or \`)
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errors.New("the string holds a character that is not printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the string has no closing quote")
}

// parameters parses (and drops) the parameters after an item:
// *( ";" *SP key [ "=" bare-item ] ).
func (p *sfParser) parameters() error {
	for p.peek() == ';' {
		p.i++
		for p.peek() == ' ' {
			p.i++
		}
		if c := p.peek(); (c < 'a' || c > 'z') && c != '*' {
			return errors.New("a parameter's name must start with a lowercase letter or *")
		}
		for c := p.peek(); c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*'; c = p.peek() {
			p.i++
		}
		if p.peek() == '=' {
			p.i++
			if err := p.bareItem(); err != nil {
				return err
			}
		}
	}
	return nil
}

// bareItem parses a parameter's value: a number, string, token, byte
// sequence or boolean.
func (p *sfParser) bareItem() error {
	switch c := p.peek(); {
	case c == '"':
		_, err := p.string()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == ':':
		p.i++
		for c := p.peek(); c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='; c = p.peek() {
			p.i++
		}
		if p.peek() != ':' {
			return errors.New("a parameter's byte sequence has no closing colon")
		}
		p.i++
	case c == '?':
		p.i++
		if c := p.peek(); c != '0' && c != '1' {
			return errors.New("a parameter's boolean must be ?0 or ?1")
		}
		p.i++
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		for c := p.peek(); c > 0x20 && c < 0x7f && !strings.ContainsRune(`"(),;<=>?@[\]{}`, rune(c)); c = p.peek() {
			p.i++
		}
	default:
		return errors.New("a parameter's value is not an RFC 8941 bare item")
	}
	return nil
}

// number parses an sf-integer (at most 15 digits) or sf-decimal (at most 12
// digits, a dot, 1 to 3 digits).
func (p *sfParser) number() error {
	if p.peek() == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for c := p.peek(); c >= '0' && c <= '9'; c = p.peek() {
			p.i++
			n++
		}
		return n
	}
	whole := digits()
	if whole == 0 {
		return errors.New("a parameter's number has no digits")
	}
	if p.peek() != '.' {
		if whole > 15 {
			return errors.New("a parameter's integer has more than 15 digits")
		}
		return nil
	}
	p.i++
	if frac := digits(); whole > 12 || frac < 1 || frac > 3 {
		return errors.New("a parameter's decimal must have at most 12 digits, a dot and 1 to 3 digits")
	}
	return nil
}

// RecordKey is the key of the record of the request that caller sent with
// key: the caller with '%', '/', '#' and the bytes that are control
// characters or not UTF-8 percent-encoded, a '/', and the key. When that is
// longer than idem's 256 bytes it is "#" and the hex SHA-256 of it instead,
// which no composed key can be, since a caller's '#' is encoded and its
// composed key starts with the caller or with '/'.
func RecordKey(caller, key string) string {
	var b strings.Builder
	b.Grow(len(caller) + 1 + len(key))
	for i := 0; i < len(caller); {
		r, size := utf8.DecodeRuneInString(caller[i:])
		switch {
		case r == '%' || r == '/' || r == '#' || r < 0x20 || r == 0x7f || r == utf8.RuneError && size == 1:
			b.WriteByte('%')
			b.WriteByte(upperHex[caller[i]>>4])
			b.WriteByte(upperHex[caller[i]&0xf])
		default:
			b.WriteString(caller[i : i+size])
		}
		i += size
	}
	b.WriteByte('/')
	b.WriteString(key)
	if b.Len() <= limits.MaxKeyBytes {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "#" + hex.EncodeToString(sum[:])
}

const upperHex = "0123456789ABCDEF"
