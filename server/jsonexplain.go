package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// maxJSONDepth is how deeply a request body may nest objects and arrays; no
// request nests more than two levels (ResolveRecordRequest.completed.result).
const maxJSONDepth = 16

// strictJSON is how vanguard decodes a request (NewJSONHandler's codec).
var strictJSON = protojson.UnmarshalOptions{}

// explain says what is wrong with body, the JSON of a request of type desc,
// in the API's terms, or returns nil when nothing is: it runs only once the
// strict decoding has refused body (or, with inPath, the fields a REST
// route's path names, may find one in it). The error is INVALID_ARGUMENT
// naming the field: the field's own reason where it has one
// (INVALID_LEASE_TTL for a lease_ttl that is not a duration), UNKNOWN_FIELD
// with the field it may have meant, MALFORMED_REQUEST with a byte offset
// for a body that is not JSON.
func explain(body []byte, desc protoreflect.MessageDescriptor, inPath map[protoreflect.Name]bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return malformed("", "the body is empty; send the request as a JSON object ({} when no field is set)")
	}
	if depth(body) > maxJSONDepth {
		return malformed("", "the body nests objects and arrays more than %d deep; no request nests more than 2", maxJSONDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return notJSON(err, dec.InputOffset(), len(body))
	}
	if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return malformed("", "the body is not JSON: data after the end of the JSON value at byte %d", len(body)-len(rest))
	}
	if top[0] != '{' {
		return malformed("", "the body is %s; send the request as one JSON object of its fields: {\"field\": value, …}", kind(top))
	}
	return explainObject(top, desc, "", inPath)
}

// explainObject explains the members of v, the object of a message desc at
// prefix ("completed.") in the body.
func explainObject(v json.RawMessage, desc protoreflect.MessageDescriptor, prefix string, inPath map[protoreflect.Name]bool) error {
	var members []struct {
		name  string
		value json.RawMessage
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	_, _ = dec.Token() // {
	for dec.More() {
		name, _ := dec.Token()
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return notJSON(err, 0, 0)
		}
		members = append(members, struct {
			name  string
			value json.RawMessage
		}{name.(string), value})
	}
	seen, oneofs := map[protoreflect.FieldNumber]string{}, map[protoreflect.Name]string{}
	for _, m := range members {
		field := prefix + m.name
		fd := desc.Fields().ByJSONName(m.name)
		if fd == nil {
			fd = desc.Fields().ByName(protoreflect.Name(m.name))
		}
		if fd == nil {
			return noSuchField(desc, field, m.name, inPath)
		}
		switch first, twice := seen[fd.Number()]; {
		case inPath[fd.Name()]:
			return malformed(field, "%s is in the route's path; leave it out of the body", field)
		case twice && first == m.name:
			return malformed(field, "%s is given twice; give each field once", field)
		case twice:
			return malformed(field, "%s is given twice, as %s and as %s; give each field once", fd.JSONName(), prefix+first, field)
		}
		seen[fd.Number()] = m.name
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && string(m.value) != "null" {
			if other, ok := oneofs[od.Name()]; ok {
				return newError(codes.InvalidArgument, fieldReason(fd), fmt.Sprintf("%s and %s are both set; %s takes one of them",
					prefix+other, field, prefix+string(od.Name())), map[string]string{"field": field})
			}
			oneofs[od.Name()] = m.name
		}
		if err := explainValue(desc, fd, m.name, field, m.value); err != nil {
			return err
		}
	}
	return nil
}

// explainValue explains v, the value of the field fd of desc sent as name,
// at field in the body: inside it when it is one of idem's messages or a
// list of them, else by decoding it alone.
func explainValue(desc protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, name, field string, v json.RawMessage) error {
	if fd.Message() != nil && fd.Message().FullName().Parent() == "idem.v1" {
		var elems []json.RawMessage
		switch {
		case fd.IsList() && json.Unmarshal(v, &elems) == nil:
			for i, e := range elems {
				at := fmt.Sprintf("%s[%d]", field, i)
				if e[0] != '{' {
					return invalidValue(fd, at, e)
				}
				if err := explainObject(e, fd.Message(), at+".", nil); err != nil {
					return err
				}
			}
			return nil
		case !fd.IsList() && v[0] == '{':
			return explainObject(v, fd.Message(), field+".", nil)
		}
	}
	one := append(append(append([]byte{'{'}, strconv.Quote(name)...), ':'), v...)
	if strictJSON.Unmarshal(append(one, '}'), dynamicpb.NewMessage(desc)) == nil {
		return nil
	}
	if fd.Kind() == protoreflect.StringKind && !fd.IsList() && v[0] == '"' {
		// A JSON string protojson refuses for a string field is not UTF-8
		// (an escaped surrogate without its pair, say).
		var s string
		_ = json.Unmarshal(v, &s) // what is not UTF-8 becomes U+FFFD
		return invalidText(fieldReason(fd), &store.TextError{Field: field, Problem: store.TextInvalidUTF8, Offset: max(0, strings.IndexRune(s, utf8.RuneError))})
	}
	return invalidValue(fd, field, v)
}

// noSuchField is UNKNOWN_FIELD for the member name of desc, sent as field:
// it suggests the field that a wrong case, a missing underscore or a slip
// of a letter or two hides ("retriable" for "retryable"), and lists the
// fields there are.
func noSuchField(desc protoreflect.MessageDescriptor, field, name string, inPath map[protoreflect.Name]bool) error {
	fold := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	var names []string
	suggest := ";"
	best := max(1, len(fold(name))/4) + 1 // at most a quarter of its letters away
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

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range ra {
		cur := append(make([]int, 0, len(rb)+1), i+1)
		for j := range rb {
			cost := 1
			if ra[i] == rb[j] {
				cost = 0
			}
			cur = append(cur, min(prev[j+1]+1, cur[j]+1, prev[j]+cost))
		}
		prev = cur
	}
	return prev[len(rb)]
}

// depth is how deeply body nests objects and arrays.
func depth(body []byte) int {
	d, deepest, inString := 0, 0, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// notJSON is MALFORMED_REQUEST for the syntax error err, at or near offset.
func notJSON(err error, offset int64, size int) error {
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return malformed("", "the body is not JSON: %s at byte %d", syntax.Error(), syntax.Offset-1)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("", "the body is not JSON: it ends in the middle of a value (byte %d); is it cut short?", size)
	}
	return malformed("", "the body is not JSON: %v at byte %d", err, offset)
}

// kind names the kind of a JSON value.
func kind(v json.RawMessage) string {
	switch v[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "a number"
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
// parameter"). The name need not be UTF-8: the message quotes it, the
// metadata has U+FFFD for what is not.
func unknownField(field, what, format string, args ...any) error {
	return newError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_UNKNOWN_FIELD,
		fmt.Sprintf("unknown %s %q", what, field)+fmt.Sprintf(format, args...),
		map[string]string{"field": strings.ToValidUTF8(field, "\uFFFD")})
}

// unsupportedMedia is MALFORMED_REQUEST naming the header, for the 415 of a
// Content-Type or Content-Encoding the API does not read.
func unsupportedMedia(header, msg string) error {
	return newError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, msg, map[string]string{"header": header})
}

// tooLarge is RESOURCE_EXHAUSTED / REQUEST_TOO_LARGE, answered with 413.
func tooLarge(format string, args ...any) error {
	return newError(codes.ResourceExhausted, idemv1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE, fmt.Sprintf(format, args...), nil)
}

// fieldReason is the reason of a bad value of fd: INVALID_<FIELD> after
// the field or its oneof, the reason the server's validation of it gives,
// when ErrorReason has one; MALFORMED_REQUEST otherwise.
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

// invalidValue is fd's reason for its value v, sent as field.
func invalidValue(fd protoreflect.FieldDescriptor, field string, v json.RawMessage) error {
	shown := string(v)
	if !utf8.ValidString(shown) {
		shown = strconv.QuoteToASCII(shown)
	}
	return newError(codes.InvalidArgument, fieldReason(fd),
		fmt.Sprintf("%s is %s; it must be %s", field, limits.Ellipsis(shown, 64), expected(fd)), map[string]string{"field": field})
}

// invalidUTF8 is fd's reason, sent as field, for value, text that is not
// UTF-8, as the server's validation answers such text.
func invalidUTF8(fd protoreflect.FieldDescriptor, field, value string) error {
	err, _ := store.CheckText(field, value).(*store.TextError)
	if err == nil {
		err = &store.TextError{Field: field, Problem: store.TextInvalidUTF8}
	}
	return invalidText(fieldReason(fd), err)
}

// expected says what JSON fd takes.
func expected(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsList():
		return "an array"
	case fd.IsMap():
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
		var names []string
		for i := range fd.Enum().Values().Len() {
			names = append(names, string(fd.Enum().Values().Get(i).Name()))
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
