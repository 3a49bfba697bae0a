package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldError is one problem with the config, at a field path such as
// "apps.photos.backends[1]".
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Errors is every problem found in a config, in file order for decode
// problems and field order for validation problems.
type Errors []FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return "config: " + strings.Join(lines, "\n  ")
}

func (es *Errors) add(path, format string, args ...any) {
	*es = append(*es, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Load reads, decodes and validates the config file at path, which must be
// a regular file of at most MaxConfigBytes, through a Files of its own.
func Load(path string) (*Config, error) { return new(Files).Load(context.Background(), path) }

// Load reads, decodes and validates the config file at path, which must be
// a regular file of at most MaxConfigBytes. It and every file the config
// names are read through f, each within f's Timeout and not past ctx.
func (f *Files) Load(ctx context.Context, path string) (*Config, error) {
	data, err := f.Read(ctx, path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := parse(data, reader{ctx: ctx, f: f})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	cfg.Checksum = "sha256:" + hex.EncodeToString(sum[:])
	return cfg, nil
}

// Parse decodes and validates a YAML config. On error it returns Errors
// listing every problem found, and no Config. An empty document is the
// default config; a key whose value is empty (null) keeps its default.
// The files the config names are read through a Files of its own.
func Parse(data []byte) (*Config, error) { return parse(data, ownReader()) }

func parse(data []byte, rd reader) (*Config, error) {
	cfg := Default()
	root, err := parseDocument(data)
	if err != nil {
		return nil, Errors{{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var errs Errors
	if root != nil {
		decodeValue(root, reflect.ValueOf(&cfg).Elem(), "", &errs)
	}
	// Validate even when decoding failed, so one run reports every problem.
	// A field that failed to decode keeps its default, but a list item or a
	// whole section that failed may be left empty: validation problems at or
	// under a path that already has a decode error would only repeat it.
	if err := cfg.validate(rd); err != nil {
		decodeErrs := len(errs)
		for _, e := range err.(Errors) {
			if !covered(errs[:decodeErrs], e.Path) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &cfg, nil
}

// parseDocument returns the root node of the only YAML document in data, or
// nil when there is none. A second document is an error rather than being
// silently ignored.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, err
	case len(next.Content) > 0 && !isNull(next.Content[0]):
		return nil, fmt.Errorf("line %d: a config file holds one YAML document, found a second", next.Content[0].Line)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// covered reports whether path is at or under the path of one of errs.
func covered(errs Errors, path string) bool {
	for _, e := range errs {
		if e.Path == "" {
			continue
		}
		if path == e.Path || strings.HasPrefix(path, e.Path+".") || strings.HasPrefix(path, e.Path+"[") {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	pathDecoderType = reflect.TypeFor[pathDecoder]()
)

// pathDecoder is implemented by config types with more than one YAML form
// (a scalar shorthand or a mapping) so their errors keep full field paths.
type pathDecoder interface {
	decodeYAML(n *yaml.Node, path string, errs *Errors)
}

// elemMaker is implemented by map values that start from defaults.
type elemMaker interface{ newElem() any }

// decodeValue decodes n into v, recording errors with their field paths, so
// one pass reports every unknown key and every bad value, not only the first.
// It writes only the fields present in n, so defaults set beforehand survive;
// a null value (`key:` or `key: ~`) counts as absent and keeps the default.
func decodeValue(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(pathDecoderType) {
		v.Addr().Interface().(pathDecoder).decodeYAML(n, path, errs)
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			errs.add(path, "%s", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		decodeValue(n, v.Elem(), path, errs)
	case reflect.Struct:
		decodeStruct(n, v, path, errs)
	case reflect.Map:
		decodeMap(n, v, path, errs)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			errs.add(path, "want a list, got a %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if isNull(resolve(e)) {
				errs.add(ep, "empty list item")
				continue
			}
			decodeValue(e, s.Index(i), ep, errs)
		}
		v.Set(s)
	default:
		decodeScalar(n, v, path, errs)
	}
}

// decodeScalar decodes a string, bool or integer field. YAML would turn 2.5
// into the integer 2; that is reported instead, never silently truncated.
func decodeScalar(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if n.Kind != yaml.ScalarNode {
		errs.add(path, "want a %s, got a %s", v.Kind(), kindName(n))
		return
	}
	integer := v.Kind() >= reflect.Int && v.Kind() <= reflect.Uint64
	if integer && n.ShortTag() != "!!int" {
		errs.add(path, "%q is not a valid %s", n.Value, v.Kind())
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		errs.add(path, "%q is not a valid %s", n.Value, v.Kind())
	}
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// decodeShorthand decodes a config type written either as one scalar (into
// the field short points to) or as a mapping of its fields (into whole, a
// pointer to the struct), so each such type states only its shorthand.
func decodeShorthand(n *yaml.Node, path string, errs *Errors, whole, short any) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode {
		decodeValue(n, reflect.ValueOf(short).Elem(), path, errs)
		return
	}
	decodeStruct(n, reflect.ValueOf(whole).Elem(), path, errs)
}

func decodeStruct(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if n.Kind != yaml.MappingNode {
		errs.add(path, "want a mapping, got a %s", kindName(n))
		return
	}
	// No map per call: a wave of cold hosts decodes every stored app's
	// structs, and the fields are few enough to scan.
	t := v.Type()
	var seenArr [64]bool
	seen := seenArr[:0]
	if t.NumField() <= len(seenArr) {
		seen = seenArr[:t.NumField()]
	} else {
		seen = make([]bool, t.NumField())
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		p := join(path, key)
		if isMerge(n.Content[i], p, errs) {
			continue
		}
		idx := fieldIndex(t, key)
		if idx < 0 {
			errs.add(p, "unknown key (known keys: %s)", strings.Join(knownKeys(t), ", "))
			continue
		}
		if seen[idx] {
			errs.add(p, "key appears twice")
			continue
		}
		seen[idx] = true
		decodeValue(n.Content[i+1], v.Field(idx), p, errs)
	}
}

// yamlName is a struct field's key: its yaml tag's name ("" or "-": none).
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// fieldIndex is the index of t's field whose key is key, -1 for none.
func fieldIndex(t reflect.Type, key string) int {
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" && name == key {
			return i
		}
	}
	return -1
}

// knownKeys are t's keys, sorted, for an unknown key's error.
func knownKeys(t reflect.Type) []string {
	var known []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			known = append(known, name)
		}
	}
	sort.Strings(known)
	return known
}

func decodeMap(n *yaml.Node, v reflect.Value, path string, errs *Errors) {
	if n.Kind != yaml.MappingNode {
		errs.add(path, "want a mapping, got a %s", kindName(n))
		return
	}
	if v.IsNil() && len(n.Content) > 0 { // an empty mapping stays nil, like an absent one
		v.Set(reflect.MakeMap(v.Type()))
	}
	et := v.Type().Elem()
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		p := join(path, key)
		if isMerge(n.Content[i], p, errs) {
			continue
		}
		if v.MapIndex(reflect.ValueOf(key)).IsValid() {
			errs.add(p, "key appears twice")
			continue
		}
		var ev reflect.Value
		if m, ok := reflect.Zero(et).Interface().(elemMaker); ok {
			ev = reflect.ValueOf(m.newElem())
		} else {
			ev = reflect.New(et).Elem()
		}
		decodeValue(n.Content[i+1], ev, p, errs)
		v.SetMapIndex(reflect.ValueOf(key), ev)
	}
}

// isMerge reports (and records as an error) a YAML merge key, "<<".
func isMerge(key *yaml.Node, path string, errs *Errors) bool {
	if key.ShortTag() != "!!merge" {
		return false
	}
	errs.add(path, "YAML merge keys are not supported; alias a whole mapping or repeat the keys")
	return true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
