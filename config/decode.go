package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemhq/idem/limits"
)

// Parse decodes a configuration strictly and validates it. An unknown
// field, a key given twice or a value of the wrong type is an error, and
// every error is one line that names the field by its path and the line it
// is on: "tenants[1].max_result_bytes: want an integer, got "lots" (line 7)".
//
// The file is read as a node tree first and checked against File's own
// fields (walk), so that no error depends on the wording of the YAML
// library's messages; the tree is then decoded into File, which cannot fail
// on anything the walk checked.
func Parse(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errEmpty
		}
		return nil, oneLine(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document; keep one")
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, errEmpty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping with a tenants list", root.Line)
	}
	w := newWalk()
	if err := w.value(root, "", reflect.TypeFor[File]()); err != nil {
		return nil, err
	}
	var f File
	if err := doc.Decode(&f); err != nil {
		// What the walk leaves to the decoder: an alias inside its own
		// anchor, and aliasing the decoder finds excessive.
		return nil, oneLine(err)
	}
	if err := f.Validate(); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) && fe.line == 0 {
			fe.line = w.lineOf(fe.path)
		}
		return nil, err
	}
	return &f, nil
}

var errEmpty = errors.New("the file is empty; it needs a tenants list")

// fieldError is a broken rule at one field of the file.
type fieldError struct {
	path string // tenants[1].rate_limit.burst; empty for the whole file
	line int    // 0 when unknown, as for a File built in code
	err  error
}

func fieldErrorf(path, format string, args ...any) error {
	return &fieldError{path: path, err: fmt.Errorf(format, args...)}
}

func (e *fieldError) Error() string {
	var b strings.Builder
	if e.path != "" {
		b.WriteString(e.path + ": ")
	}
	b.WriteString(e.err.Error())
	if e.line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.line)
	}
	return b.String()
}

func (e *fieldError) Unwrap() error { return e.err }

// maxAliasedMappings bounds the mappings the walk visits through aliases
// and merge keys, which a small file can make exponential (a "merge bomb").
const maxAliasedMappings = 10000

// walk checks a node tree against the Go type it is to be decoded into,
// the way yaml.v3's decoder with KnownFields(true) and unique keys would,
// and reports the first problem as a *fieldError. The check follows the
// type's yaml tags, so a field added to File, Tenant or a struct of theirs
// is checked without a change here.
type walk struct {
	// lines holds the line of every field and list item walked, by path,
	// for the errors of Validate.
	lines map[string]int
	// aliases holds the aliases being followed, so that an alias inside its
	// own anchor ends the walk instead of recursing forever; the decoder
	// then reports it.
	aliases map[*yaml.Node]bool
	// aliased counts the mappings visited through an alias.
	aliased int
}

func newWalk() *walk {
	return &walk{lines: map[string]int{}, aliases: map[*yaml.Node]bool{}}
}

// lineOf returns the line of path, or of the nearest enclosing field the
// walk saw (a missing field is reported on its mapping's line); 0 if none.
func (w *walk) lineOf(path string) int {
	for path != "" {
		if line, ok := w.lines[path]; ok {
			return line
		}
		path = path[:max(strings.LastIndexAny(path, ".["), 0)]
	}
	return 0
}

func (w *walk) errorf(path string, n *yaml.Node, format string, args ...any) error {
	return &fieldError{path: path, line: n.Line, err: fmt.Errorf(format, args...)}
}

var durationType = reflect.TypeFor[time.Duration]()

// value checks node n, the value at path, against type t.
func (w *walk) value(n *yaml.Node, path string, t reflect.Type) error {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || w.aliases[n] {
			return nil // the decoder reports an alias inside its own anchor
		}
		w.aliases[n] = true
		defer delete(w.aliases, n)
		n = n.Alias
		if n.Kind == yaml.MappingNode {
			if w.aliased++; w.aliased > maxAliasedMappings {
				return errors.New("the file merges mappings (<<) too many times over")
			}
		}
		return w.value(n, path, t)
	}
	if isNull(n) {
		return nil // the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return w.wrongType(path, n, t)
		}
		return w.mapping(n, path, t, nil)
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		if n.Kind != yaml.SequenceNode {
			return w.wrongType(path, n, t)
		}
		// The decoder drops a null item where the type has no nil (a "-"
		// with nothing after it), so the items after it move up one.
		i := 0
		for _, item := range n.Content {
			if isNull(deref(item)) && !nillable(t.Elem()) {
				continue
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			w.lines[p] = item.Line
			if err := w.value(item, p, t.Elem()); err != nil {
				return err
			}
			i++
		}
		return nil
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		if n.Kind != yaml.MappingNode {
			return w.wrongType(path, n, t)
		}
		if err := duplicateKey(n, path); err != nil {
			return err
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isMerge(k) {
				continue // left to the decoder
			}
			p := fmt.Sprintf("%s[%q]", path, k.Value)
			w.lines[p] = k.Line
			if err := w.value(v, p, t.Elem()); err != nil {
				return err
			}
		}
		return nil
	}
	// A scalar: the decoder itself says whether it fits the type, and the
	// message is ours.
	if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil {
		return w.wrongType(path, n, t)
	}
	return nil
}

// mapping checks a mapping decoded into struct type t: every key is a field
// of t, given once, with a value of the field's type. claimed holds the
// fields already set when n is merged into another mapping (<<): those
// keep the value they have, as YAML's merge keys say, so the walk skips
// them here as the decoder does.
func (w *walk) mapping(n *yaml.Node, path string, t reflect.Type, claimed map[string]bool) error {
	if err := duplicateKey(n, path); err != nil {
		return err
	}
	fields := yamlFields(t)
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			merge = v
			continue
		}
		name := deref(k).Value
		if claimed != nil {
			if claimed[name] {
				continue
			}
			claimed[name] = true
		}
		p := join(path, name)
		f, ok := fields[name]
		if !ok || deref(k).Kind != yaml.ScalarNode {
			return fieldErrorf(p, "unknown field (line %d); known fields here: %s", k.Line, strings.Join(fieldNames(fields), ", "))
		}
		w.lines[p] = k.Line
		if err := w.value(v, p, f.Type); err != nil {
			return err
		}
	}
	if merge == nil {
		return nil
	}
	if claimed == nil {
		claimed = map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			claimed[deref(n.Content[i]).Value] = true
		}
	}
	merged := []*yaml.Node{merge}
	if merge.Kind == yaml.SequenceNode {
		merged = merge.Content
	}
	for _, m := range merged {
		target := deref(m)
		if target.Kind != yaml.MappingNode {
			return w.errorf(join(path, "<<"), m, "a merge key takes a mapping, or a list of mappings, to merge in")
		}
		if m.Kind == yaml.AliasNode {
			if w.aliases[m] {
				continue // the decoder reports an alias inside its own anchor
			}
			if w.aliased++; w.aliased > maxAliasedMappings {
				return errors.New("the file merges mappings (<<) too many times over")
			}
			w.aliases[m] = true
			err := w.mapping(target, path, t, claimed)
			delete(w.aliases, m)
			if err != nil {
				return err
			}
			continue
		}
		if err := w.mapping(target, path, t, claimed); err != nil {
			return err
		}
	}
	return nil
}

// duplicateKey reports a key given twice in one mapping, which the decoder
// refuses too.
func duplicateKey(n *yaml.Node, path string) error {
	type key struct {
		kind  yaml.Kind
		value string
	}
	seen := make(map[key]*yaml.Node, len(n.Content)/2)
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i]
		if first, dup := seen[key{k.Kind, k.Value}]; dup {
			return &fieldError{path: join(path, k.Value), line: k.Line,
				err: fmt.Errorf("already defined at line %d; give each key once", first.Line)}
		}
		seen[key{k.Kind, k.Value}] = k
	}
	return nil
}

// wrongType reports a value that does not fit type t.
func (w *walk) wrongType(path string, n *yaml.Node, t reflect.Type) error {
	return w.errorf(path, n, "want %s, got %s", describeType(t), describeNode(n))
}

// describeType names a Go type the way the file's reader knows it.
func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return "a duration (30s, 5m, 1h30m)"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "an integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Struct:
		return "a mapping with " + strings.Join(fieldNames(yamlFields(t)), ", ")
	case t.Kind() == reflect.Slice:
		switch e := t.Elem(); {
		case e.Kind() == reflect.String:
			return "a list of strings"
		case e.Kind() == reflect.Struct || (e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.Struct):
			return "a list of mappings"
		}
		return "a list"
	case t.Kind() == reflect.Map:
		return "a mapping"
	}
	return t.String()
}

// describeNode says what a node holds, without echoing more than the start
// of a long string: it may be a token pasted by mistake.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			if len(n.Value) > 10 {
				return fmt.Sprintf("%q", limits.Clip(n.Value, 7)+"…")
			}
			return fmt.Sprintf("%q", n.Value)
		}
		return n.Value
	}
	return "something else"
}

// yamlFields maps the yaml names of struct type t's fields to the fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name) // the decoder's default
		}
		fields[name] = f
	}
	return fields
}

func fieldNames(fields map[string]reflect.StructField) []string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// deref returns the node an alias stands for.
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isMerge reports a merge key, "<<", as the decoder recognises one.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

func nillable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return true
	}
	return false
}

// oneLine flattens an error of the YAML library to one line without its
// "yaml: " prefix. Its text is passed on as it is, never parsed.
func oneLine(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return errors.New(strings.Join(strings.Fields(msg), " "))
}
