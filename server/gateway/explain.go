package gateway

import (
	"bytes"
	"cmp"
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
	"github.com/idemhq/idem/server/services"
	"github.com/idemhq/idem/store"
)

// maxDepth is how deeply a body may nest objects and arrays; no request
// nests more than two levels (ResolveRecordRequest.completed.result).
const maxDepth = 16

// strictJSON is how vanguard decodes a request (New's codec).
var strictJSON = protojson.UnmarshalOptions{}

// explain says what is wrong with body, the JSON of a request desc, in the
// API's terms, or returns nil when nothing is. It runs only on the error
// path, once the strict decoding has refused body, or when body may name a
// field of the REST route's path (inPath). Its errors are INVALID_ARGUMENT
// naming the field: with the field's own reason where it has one
// (INVALID_LEASE_TTL), UNKNOWN_FIELD with the field it may have meant, and
// MALFORMED_REQUEST with a byte offset for what is not JSON.
func explain(body []byte, desc protoreflect.MessageDescriptor, inPath map[protoreflect.Name]bool) error {
	if err := scan(body); err != nil {
		return err
	}
	if top := bytes.TrimLeft(body, " \t\r\n"); top[0] != '{' {
		kind := map[byte]string{'[': "an array", '"': "a string", 't': "true or false", 'f': "true or false", 'n': "null"}[top[0]]
		return malformed("", "the body is %s; send the request as one JSON object of its fields: {\"field\": value, …}", cmp.Or(kind, "a number"))
	}
	return explainObject(body, desc, "", inPath)
}

// scan checks that body is one JSON value, nested at most maxDepth deep.
func scan(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	for level, n := 0, 0; ; n++ {
		end := dec.InputOffset()
		tok, err := dec.Token()
		var syntax *json.SyntaxError
		switch {
		case err == io.EOF && n == 0:
			return malformed("", "the body is empty; send the request as a JSON object ({} when no field is set)")
		case err == io.EOF && level == 0:
			return nil
		case level == 0 && n > 0:
			return malformed("", "the body is not JSON: data after the end of the JSON value at byte %d", end)
		case errors.As(err, &syntax):
			return malformed("", "the body is not JSON: %s at byte %d", syntax.Error(), syntax.Offset-1)
		case err != nil:
			return malformed("", "the body is not JSON: it ends in the middle of a value (byte %d); is it cut short?", len(body))
		case tok == json.Delim('{') || tok == json.Delim('['):
			if level++; level > maxDepth {
				return malformed("", "the body nests objects and arrays more than %d deep; no request nests more than 2", maxDepth)
			}
		case tok == json.Delim('}') || tok == json.Delim(']'):
			level--
		}
	}
}

// explainObject explains the members of v, the object of a message desc at
// prefix ("completed.") in the body: each must name a field of desc once,
// none of inPath, at most one of a oneof, and have a value of its type.
func explainObject(v json.RawMessage, desc protoreflect.MessageDescriptor, prefix string, inPath map[protoreflect.Name]bool) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	_, _ = dec.Token() // {
	seen, oneofs := map[protoreflect.FieldNumber]string{}, map[protoreflect.Name]string{}
	for dec.More() {
		token, _ := dec.Token()
		name, field := token.(string), prefix+token.(string)
		var value json.RawMessage
		_ = dec.Decode(&value) // explain decoded the whole body
		fd := cmp.Or(desc.Fields().ByJSONName(name), desc.Fields().ByName(protoreflect.Name(name)))
		if fd == nil {
			return noSuchField(desc, field, name, inPath)
		}
		first, twice := seen[fd.Number()]
		seen[fd.Number()] = name
		switch od := fd.ContainingOneof(); {
		case inPath[fd.Name()]:
			return malformed(field, "%s is in the route's path; leave it out of the body", field)
		case twice && first == name:
			return malformed(field, "%s is given twice; give each field once", field)
		case twice:
			return malformed(field, "%s is given twice, as %s and as %s; give each field once", fd.JSONName(), prefix+first, field)
		case od != nil && !od.IsSynthetic() && oneofs[od.Name()] != "" && string(value) != "null":
			return invalid(fieldReason(fd), field, fmt.Sprintf("%s and %s are both set; %s takes one of them",
				prefix+oneofs[od.Name()], field, prefix+string(od.Name())))
		case od != nil && string(value) != "null":
			oneofs[od.Name()] = name
		}
		if err := explainValue(desc, fd, name, field, value); err != nil {
			return err
		}
	}
	return nil
}

// explainValue explains v, sent as name for the field fd of desc: inside it
// when it is one of idem's messages or a list of them, else by decoding it
// alone.
func explainValue(desc protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, name, field string, v json.RawMessage) error {
	var elems []json.RawMessage
	switch idem := fd.Message() != nil && fd.Message().FullName().Parent() == "idem.v1"; {
	case idem && !fd.IsList() && v[0] == '{':
		return explainObject(v, fd.Message(), field+".", nil)
	case idem && fd.IsList() && json.Unmarshal(v, &elems) == nil:
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
	}
	one := append(append(append([]byte{'{'}, strconv.Quote(name)...), ':'), v...)
	if strictJSON.Unmarshal(append(one, '}'), dynamicpb.NewMessage(desc)) == nil {
		return nil
	}
	if fd.Kind() == protoreflect.StringKind && !fd.IsList() && v[0] == '"' {
		// A JSON string refused for a string field is not UTF-8, or has an
		// escaped surrogate without its pair; each becomes U+FFFD here.
		var s string
		_ = json.Unmarshal(v, &s)
		return invalidUTF8(fd, field, s)
	}
	return invalidValue(fd, field, v)
}

// noSuchField is UNKNOWN_FIELD for the member name of desc, sent as field:
// it suggests the field a wrong case, a missing underscore or a slip of a
// letter or two hides ("retriable" for "retryable"), and lists the fields.
func noSuchField(desc protoreflect.MessageDescriptor, field, name string, inPath map[protoreflect.Name]bool) error {
	fold := func(s string) []rune { return []rune(strings.ToLower(strings.ReplaceAll(s, "_", ""))) }
	var names []string
	suggest, best := ";", max(1, len(fold(name))/4)+1 // at most a quarter of its letters away
	for i := range desc.Fields().Len() {
		if fd := desc.Fields().Get(i); !inPath[fd.Name()] {
			names = append(names, fd.JSONName())
			if d := editDistance(fold(fd.JSONName()), fold(name)); d < best {
				best, suggest = d, fmt.Sprintf("; did you mean %q?", fd.JSONName())
			}
		}
	}
	return unknownField(field, "field", "%s %s has the fields %s", suggest, desc.Name(), strings.Join(names, ", "))
}

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b []rune) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := range a {
		diagonal := row[0]
		row[0] = i + 1
		for j := range b {
			substitute := diagonal
			if a[i] != b[j] {
				substitute++
			}
			diagonal, row[j+1] = row[j+1], min(row[j+1]+1, row[j]+1, substitute)
		}
	}
	return row[len(b)]
}

// invalid is INVALID_ARGUMENT with reason, naming field in its metadata
// when it is not "", with U+FFFD for what of it is not UTF-8, which a
// status must be.
func invalid(reason idemv1.ErrorReason, field, msg string) error {
	var md map[string]string
	if field != "" {
		md = map[string]string{"field": strings.ToValidUTF8(field, "\uFFFD")}
	}
	return services.NewError(codes.InvalidArgument, reason, msg, md)
}

func malformed(field, format string, args ...any) error {
	return invalid(idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, field, fmt.Sprintf(format, args...))
}

// unknownField is UNKNOWN_FIELD for field, where what says what it is
// ("field", "query parameter").
func unknownField(field, what, format string, args ...any) error {
	return invalid(idemv1.ErrorReason_ERROR_REASON_UNKNOWN_FIELD, field, fmt.Sprintf("unknown %s %q", what, field)+fmt.Sprintf(format, args...))
}

// unsupported is MALFORMED_REQUEST naming a header, which is answered 415.
func unsupported(header, msg string) error {
	return services.NewError(codes.InvalidArgument, idemv1.ErrorReason_ERROR_REASON_MALFORMED_REQUEST, msg, map[string]string{"header": header})
}

// fieldReason is the reason of a bad value of fd: INVALID_<FIELD> after the
// field or its oneof, the reason the services' validation of it gives, when
// ErrorReason has one; MALFORMED_REQUEST otherwise.
func fieldReason(fd protoreflect.FieldDescriptor) idemv1.ErrorReason {
	name := fd.Name()
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		name = od.Name()
	}
	if r, ok := idemv1.ErrorReason_value["ERROR_REASON_INVALID_"+strings.ToUpper(string(name))]; ok {
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
	return invalid(fieldReason(fd), field, fmt.Sprintf("%s is %s; it must be %s", field, limits.Ellipsis(shown, 64), expected(fd)))
}

// invalidUTF8 is fd's reason, sent as field, for value, text that is not
// UTF-8, as the services' validation answers it.
func invalidUTF8(fd protoreflect.FieldDescriptor, field, value string) error {
	err, _ := store.CheckText(field, value).(*store.TextError)
	if err == nil {
		err = &store.TextError{Field: field, Problem: store.TextInvalidUTF8, Offset: max(0, strings.IndexRune(value, utf8.RuneError))}
	}
	return services.InvalidText(fieldReason(fd), err)
}

// expected says what JSON fd takes, for the kinds idem's requests have.
func expected(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsList():
		return "an array"
	case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Duration":
		return `a duration: a string of seconds with the suffix s, such as "30s" or "1.5s", of at most 315576000000s`
	case fd.Enum() != nil:
		var names []string
		for i := range fd.Enum().Values().Len() {
			names = append(names, string(fd.Enum().Values().Get(i).Name()))
		}
		return "one of " + strings.Join(names, ", ") + ", or its number"
	}
	return cmp.Or(expectedOf[fd.Kind()], "a "+fd.Kind().String())
}

var expectedOf = map[protoreflect.Kind]string{
	protoreflect.MessageKind: "an object",
	protoreflect.StringKind:  "a string",
	protoreflect.BytesKind:   "a string of base64 (RFC 4648, with or without padding)",
	protoreflect.BoolKind:    "true or false",
	protoreflect.Int32Kind:   "an integer from -2147483648 to 2147483647",
	protoreflect.Int64Kind:   `an integer from -9223372036854775808 to 9223372036854775807, as a string ("7") or a number`,
}
