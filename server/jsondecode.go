package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// maxJSONDepth is how deeply a request body may nest objects and arrays. No
// request nests more than two levels (ResolveRecordRequest.completed.result);
// the bound keeps a body of brackets from costing a deep recursion.
const maxJSONDepth = 16

// strictJSON decodes request bodies: protobuf's JSON mapping, with a field
// the message does not have an error instead of dropped.
var strictJSON = protojson.UnmarshalOptions{DiscardUnknown: false}

// decodeJSONRequest decodes body, the JSON of a request of type desc, by the
// rules of the HTTP/JSON API (docs/http-api.md): one JSON object in UTF-8,
// every field known to desc and given once, none of inPath (the fields the
// REST route's path names), every value of its field's type. It returns
// the message, or an INVALID_ARGUMENT status whose ErrorInfo names the
// field: the field's own reason where it has one (INVALID_LEASE_TTL for a
// lease_ttl that is not a duration, INVALID_KEY with the problem
// INVALID_UTF8 for a key that is not UTF-8), UNKNOWN_FIELD for a field desc
// does not have, MALFORMED_REQUEST for the rest.
func decodeJSONRequest(body []byte, desc protoreflect.MessageDescriptor, inPath map[protoreflect.Name]bool) (proto.Message, error) {
	v, err := parseJSON(body)
	if err != nil {
		return nil, err
	}
	if v.kind != jsonObject {
		return nil, malformed("", "the body is %s; send the request as one JSON object of its fields: {\"field\": value, …}", v.kind)
	}
	if err := checkMessage(desc, v, "", inPath); err != nil {
		return nil, err
	}
	msg := newMessage(desc)
	if err := strictJSON.Unmarshal(body, msg); err != nil {
		return nil, localize(desc, v, "", err)
	}
	return msg, nil
}

func newMessage(desc protoreflect.MessageDescriptor) proto.Message {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(desc.FullName()); err == nil {
		return mt.New().Interface()
	}
	return dynamicpb.NewMessage(desc)
}

// malformed is INVALID_ARGUMENT / MALFORMED_REQUEST, naming field when it
// is not "".
func malformed(field, format string, args ...any) error {
	var md map[string]string
	if field != "" {
		md = map[string]string{"field": field}
	}
	return newError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, fmt.Sprintf(format, args...), md)
}

// unknownField is INVALID_ARGUMENT / UNKNOWN_FIELD for field, which the
// message does not have; what says where it was ("field", "query
// parameter"). The name is the client's and need not be UTF-8, which the
// status's own encoding requires: the message quotes it, the metadata has
// it with U+FFFD for what is not.
func unknownField(field, what, format string, args ...any) error {
	return newError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_UNKNOWN_FIELD,
		fmt.Sprintf("unknown %s %q", what, field)+fmt.Sprintf(format, args...),
		map[string]string{"field": strings.ToValidUTF8(field, "\uFFFD")})
}

// fieldReason is the ErrorInfo reason of a bad value of fd: the INVALID_
// reason named after the field (INVALID_LEASE_TTL for lease_ttl), or after
// its oneof (INVALID_RESOLUTION), when ErrorReason has one, the reason the
// server's own validation of that field gives; MALFORMED_REQUEST otherwise.
func fieldReason(fd protoreflect.FieldDescriptor) idemv1.ErrorReason {
	name := fd.Name()
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		name = od.Name()
	}
	if r, ok := idemv1.ErrorReason_value[reasonPrefix+"INVALID_"+strings.ToUpper(string(name))]; ok {
		return idemv1.ErrorReason(r)
	}
	return idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST
}

// invalidValue is INVALID_ARGUMENT with fd's reason for its value v, sent
// as field.
func invalidValue(fd protoreflect.FieldDescriptor, field string, v jsonValue) error {
	return newError(codes.InvalidArgument, fieldReason(fd),
		fmt.Sprintf("%s is %s; it must be %s", field, shown(v.raw), expected(fd)), map[string]string{"field": field})
}

// invalidUTF8 is INVALID_ARGUMENT with the reason of fd, a text field sent
// as field whose value is not UTF-8, and the problem INVALID_UTF8, as the
// server's validation answers such text (validateText).
func invalidUTF8(fd protoreflect.FieldDescriptor, field, value string) error {
	err := store.CheckText(field, value)
	textErr, ok := err.(*store.TextError)
	if !ok || textErr.Problem != store.TextInvalidUTF8 {
		textErr = &store.TextError{Field: field, Problem: store.TextInvalidUTF8}
	}
	return invalidText(fieldReason(fd), textErr)
}

// shown is a value as sent, cut short for a message.
func shown(raw []byte) string {
	s := string(raw)
	if !utf8.ValidString(s) {
		s = strconv.QuoteToASCII(s)
	}
	return limits.Ellipsis(s, 64)
}

// expected says what JSON fd takes.
func expected(fd protoreflect.FieldDescriptor) string {
	if fd.IsList() {
		return "an array"
	}
	if fd.IsMap() {
		return "an object"
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "a string of base64 (RFC 4648, with or without padding)"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "an integer from -2147483648 to 2147483647"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "an integer from 0 to 4294967295"
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return `an integer from -9223372036854775808 to 9223372036854775807, as a string ("7") or a number`
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return `an integer from 0 to 18446744073709551615, as a string ("7") or a number`
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		names := make([]string, values.Len())
		for i := range values.Len() {
			names[i] = string(values.Get(i).Name())
		}
		return "one of " + strings.Join(names, ", ") + ", or its number"
	}
	switch fd.Message().FullName() {
	case "google.protobuf.Duration":
		return `a duration: a string of seconds with the suffix s, such as "30s" or "1.5s", of at most 315576000000s`
	case "google.protobuf.Timestamp":
		return `an RFC 3339 time in UTC, such as "2026-01-02T15:04:05Z"`
	}
	return "an object"
}

// fieldByName finds the field a JSON member names, as protojson does: by
// its JSON name (leaseTtl) or its proto name (lease_ttl).
func fieldByName(desc protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if fd := desc.Fields().ByJSONName(name); fd != nil {
		return fd
	}
	return desc.Fields().ByName(protoreflect.Name(name))
}

// noSuchField is the error for the member name of desc that names no
// field, sent as field: it suggests the field that a wrong case, a missing
// underscore or a slip of a letter or two hides ("retriable" for
// "retryable"), and lists the fields there are.
func noSuchField(desc protoreflect.MessageDescriptor, field, name string, inPath map[protoreflect.Name]bool) error {
	fold := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	var names []string
	suggest := ";"
	// A name at most a quarter of its letters away, and the nearest.
	best := max(1, len(fold(name))/4) + 1
	for i := range desc.Fields().Len() {
		fd := desc.Fields().Get(i)
		if inPath[fd.Name()] {
			continue
		}
		names = append(names, fd.JSONName())
		if d := editDistance(fold(fd.JSONName()), fold(name)); d < best {
			best, suggest = d, fmt.Sprintf("; did you mean %q?", fd.JSONName())
		}
	}
	return unknownField(field, "field", "%s %s has the fields %s", suggest, desc.Name(), strings.Join(names, ", "))
}

// editDistance is the number of letters to insert, delete or replace to
// turn a into b (Levenshtein's distance).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range ra {
		cur := make([]int, len(rb)+1)
		cur[0] = i + 1
		for j := range rb {
			cost := 1
			if ra[i] == rb[j] {
				cost = 0
			}
			cur[j+1] = min(prev[j+1]+1, cur[j]+1, prev[j]+cost)
		}
		prev = cur
	}
	return prev[len(rb)]
}

// checkMessage checks the members of v, the JSON object of a message desc,
// and of the objects inside it: each names a field of desc once, none of
// inPath, at most one of a oneof, and each string field is UTF-8. prefix
// is the path of v in the body ("completed.").
func checkMessage(desc protoreflect.MessageDescriptor, v jsonValue, prefix string, inPath map[protoreflect.Name]bool) error {
	seen := map[protoreflect.FieldNumber]string{}
	oneofs := map[protoreflect.Name]string{}
	for _, m := range v.members {
		field := prefix + m.name
		fd := fieldByName(desc, m.name)
		if fd == nil {
			return noSuchField(desc, field, m.name, inPath)
		}
		if inPath[fd.Name()] {
			return malformed(field, "%s is in the route's path; leave it out of the body", field)
		}
		if first, ok := seen[fd.Number()]; ok {
			if first == m.name {
				return malformed(field, "%s is given twice; give each field once", field)
			}
			return malformed(field, "%s is given twice, as %s and as %s; give each field once", fd.JSONName(), prefix+first, field)
		}
		seen[fd.Number()] = m.name
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.value.kind != jsonNull {
			if other, ok := oneofs[od.Name()]; ok {
				return newError(codes.InvalidArgument, fieldReason(fd),
					fmt.Sprintf("%s and %s are both set; %s takes one of them", prefix+other, field, prefix+string(od.Name())),
					map[string]string{"field": field})
			}
			oneofs[od.Name()] = m.name
		}
		if err := checkValue(fd, m.value, field); err != nil {
			return err
		}
	}
	return nil
}

// checkValue checks the JSON v of field fd, sent as field: its shape where
// fd is a list or a message of idem's, and its UTF-8 where fd is text. The
// rest of a value's type protojson checks.
func checkValue(fd protoreflect.FieldDescriptor, v jsonValue, field string) error {
	switch {
	case v.kind == jsonNull:
		return nil
	case fd.IsList():
		if v.kind != jsonArray {
			return invalidValue(fd, field, v)
		}
		for i, e := range v.elems {
			if e.kind == jsonNull {
				return invalidValue(fd, fmt.Sprintf("%s[%d]", field, i), e)
			}
			if err := checkSingular(fd, e, fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	case fd.IsMap():
		if v.kind != jsonObject {
			return invalidValue(fd, field, v)
		}
		return nil
	}
	return checkSingular(fd, v, field)
}

func checkSingular(fd protoreflect.FieldDescriptor, v jsonValue, field string) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if v.kind != jsonString {
			return invalidValue(fd, field, v)
		}
		if !utf8.ValidString(v.str) {
			return invalidUTF8(fd, field, v.str)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.Message().FullName().Parent() == "google.protobuf" {
			return nil // a well-known type, with a JSON form of its own
		}
		if v.kind != jsonObject {
			return invalidValue(fd, field, v)
		}
		return checkMessage(fd.Message(), v, field+".", nil)
	}
	return nil
}

// localize finds the field whose value made protojson refuse the object v
// of a message desc (cause): it decodes each member alone.
func localize(desc protoreflect.MessageDescriptor, v jsonValue, prefix string, cause error) error {
	for _, m := range v.members {
		fd := fieldByName(desc, m.name)
		if fd == nil {
			continue
		}
		one := make([]byte, 0, len(m.name)+len(m.value.raw)+8)
		one = append(one, '{')
		one = strconv.AppendQuote(one, m.name)
		one = append(one, ':')
		one = append(one, m.value.raw...)
		one = append(one, '}')
		if strictJSON.Unmarshal(one, newMessage(desc)) == nil {
			continue
		}
		field := prefix + m.name
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() &&
			fd.Message().FullName().Parent() != "google.protobuf" && m.value.kind == jsonObject {
			return localize(fd.Message(), m.value, field+".", cause)
		}
		return invalidValue(fd, field, m.value)
	}
	msg := cause.Error()
	if i := strings.Index(msg, "): "); i >= 0 {
		msg = msg[i+3:]
	}
	return malformed("", "the body does not decode as a %s: %s", desc.Name(), strings.TrimPrefix(msg, "proto: "))
}

// jsonKind is the kind of a JSON value.
type jsonKind byte

const (
	jsonObject jsonKind = iota + 1
	jsonArray
	jsonString
	jsonNumber
	jsonBool
	jsonNull
)

func (k jsonKind) String() string {
	switch k {
	case jsonObject:
		return "an object"
	case jsonArray:
		return "an array"
	case jsonString:
		return "a string"
	case jsonNumber:
		return "a number"
	case jsonBool:
		return "true or false"
	}
	return "null"
}

// jsonValue is one value of a parsed JSON document.
type jsonValue struct {
	kind jsonKind
	raw  []byte // the value as sent
	// str is a string's text, unescaped. A byte that is not UTF-8, or an
	// escaped surrogate without its pair, stays in it as bytes that are
	// not UTF-8, so that the field's check finds it.
	str     string
	members []jsonMember // an object's, in order
	elems   []jsonValue  // an array's
}

type jsonMember struct {
	name  string
	value jsonValue
}

// parseJSON parses a whole JSON document (RFC 8259) into values, keeping
// what encoding/json would hide: every member of an object in order, a
// name given twice, text that is not UTF-8. Every error is
// MALFORMED_REQUEST and says where the document went wrong.
func parseJSON(data []byte) (jsonValue, error) {
	p := &jsonParser{data: data}
	p.space()
	v, err := p.value(1)
	if err != nil {
		return jsonValue{}, err
	}
	p.space()
	if p.pos < len(p.data) {
		return jsonValue{}, p.fail("data after the end of the JSON value")
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	pos  int
}

func (p *jsonParser) fail(what string) error {
	if p.pos >= len(p.data) {
		return malformed("", "the body is not JSON: it ends in the middle of a value (byte %d); is it cut short?", p.pos)
	}
	c := p.data[p.pos]
	at := strconv.QuoteRune(rune(c))
	if c >= utf8.RuneSelf || c < ' ' {
		at = fmt.Sprintf("byte 0x%02x", c)
	}
	return malformed("", "the body is not JSON: %s at byte %d (%s)", what, p.pos, at)
}

func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (jsonValue, error) {
	if p.pos >= len(p.data) {
		if p.pos == 0 {
			return jsonValue{}, malformed("", "the body is empty; send the request as a JSON object ({} when no field is set)")
		}
		return jsonValue{}, p.fail("")
	}
	start := p.pos
	var v jsonValue
	var err error
	switch c := p.data[p.pos]; {
	case c == '{' || c == '[':
		if depth > maxJSONDepth {
			return jsonValue{}, malformed("", "the body nests objects and arrays more than %d deep; no request nests more than 2", maxJSONDepth)
		}
		if c == '{' {
			v, err = p.object(depth)
		} else {
			v, err = p.array(depth)
		}
	case c == '"':
		v.kind = jsonString
		v.str, err = p.string()
	case c == '-' || c >= '0' && c <= '9':
		v.kind = jsonNumber
		err = p.number()
	case c == 't':
		v.kind = jsonBool
		err = p.literal("true")
	case c == 'f':
		v.kind = jsonBool
		err = p.literal("false")
	case c == 'n':
		v.kind = jsonNull
		err = p.literal("null")
	default:
		err = p.fail("not the start of a value")
	}
	if err != nil {
		return jsonValue{}, err
	}
	v.raw = p.data[start:p.pos]
	return v, nil
}

func (p *jsonParser) object(depth int) (jsonValue, error) {
	v := jsonValue{kind: jsonObject}
	p.pos++ // {
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return v, p.fail("expected a field name in double quotes")
		}
		name, err := p.string()
		if err != nil {
			return v, err
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return v, p.fail("expected ':' after a field name")
		}
		p.pos++
		p.space()
		val, err := p.value(depth + 1)
		if err != nil {
			return v, err
		}
		v.members = append(v.members, jsonMember{name: name, value: val})
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			p.space()
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return v, nil
		}
		return v, p.fail("expected ',' or '}' in an object")
	}
}

func (p *jsonParser) array(depth int) (jsonValue, error) {
	v := jsonValue{kind: jsonArray}
	p.pos++ // [
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		e, err := p.value(depth + 1)
		if err != nil {
			return v, err
		}
		v.elems = append(v.elems, e)
		p.space()
		if p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			p.space()
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == ']' {
			p.pos++
			return v, nil
		}
		return v, p.fail("expected ',' or ']' in an array")
	}
}

// string reads a string at p.pos (its opening quote) and returns its text.
func (p *jsonParser) string() (string, error) {
	p.pos++ // "
	start := p.pos
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' || c < ' ' {
			break
		}
		p.pos++
	}
	// Escapes or an error: unescape from here on.
	b := slices.Clone(p.data[start:p.pos])
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(b), nil
		case c < ' ':
			return "", p.fail("a control character in a string; escape it")
		case c != '\\':
			b = append(b, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.data) {
			p.pos = len(p.data)
			return "", p.fail("")
		}
		p.pos++
		switch e := p.data[p.pos]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4(p.pos + 1)
			if !ok {
				return "", p.fail(`\u without four hex digits`)
			}
			p.pos += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := p.lowSurrogate(p.pos + 1); ok && r < 0xdc00 {
					r = utf16.DecodeRune(r, r2)
					p.pos += 6
				} else {
					// A lone surrogate: kept as its three bytes, which are
					// not UTF-8, for the field's check to refuse.
					b = append(b, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
					break
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", p.fail("an unknown escape in a string")
		}
		p.pos++
	}
	return "", p.fail("")
}

func (p *jsonParser) hex4(at int) (rune, bool) {
	if at+4 > len(p.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.data[at:at+4]), 16, 32)
	return rune(n), err == nil
}

// lowSurrogate reads an escaped low surrogate (\uDC00–\uDFFF) at at.
func (p *jsonParser) lowSurrogate(at int) (rune, bool) {
	if at+6 > len(p.data) || p.data[at] != '\\' || p.data[at+1] != 'u' {
		return 0, false
	}
	r, ok := p.hex4(at + 2)
	return r, ok && r >= 0xdc00 && r <= 0xdfff
}

func (p *jsonParser) number() error {
	digits := func() bool {
		start := p.pos
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
		return p.pos > start
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if !digits() {
		return p.fail("a number without digits")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if !digits() {
			return p.fail("a number without digits after its '.'")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if !digits() {
			return p.fail("a number without digits in its exponent")
		}
	}
	return nil
}

func (p *jsonParser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.fail("not the start of a value")
	}
	p.pos += len(word)
	return nil
}
