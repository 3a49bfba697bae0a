package config

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// jsonDocument reads data as one JSON object into the node tree the YAML
// parser gives for it, without the YAML parser. The catalog stores every
// app as JSON and a wave of cold hosts composes hundreds of apps a second:
// yaml.v3's parser was half of that CPU and most of its garbage. ok is
// false for anything but a clean JSON object (not JSON, trailing data, a
// key twice), which parseDocument then reads as YAML, so the errors and
// the edge cases stay the YAML parser's.
func jsonDocument(data []byte) (n *yaml.Node, ok bool) {
	if t := bytes.TrimLeft(data, " \r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	if !yamlReadable(data) || bytes.Contains(data, []byte(`\ud`)) || bytes.Contains(data, []byte(`\uD`)) {
		// YAML refuses what JSON takes: bad UTF-8 (JSON makes it U+FFFD),
		// control characters, a surrogate pair's escapes (JSON joins them).
		return nil, false
	}
	p := jsonParser{data: data}
	n = p.value(0)
	if p.skipSpace(); n == nil || p.i != len(data) {
		return nil, false
	}
	return n, true
}

// jsonParser is a strict JSON reader over one document. encoding/json's
// Decoder.Token builds (and drops) an error after every value it reads,
// which cost as much as the rest of the parse.
type jsonParser struct {
	data []byte
	i    int
}

// maxJSONDepth bounds the nesting jsonParser follows; deeper documents go
// to the YAML parser, which has its own limit.
const maxJSONDepth = 64

// maxSimpleKey is how far (in bytes here, characters in yaml.v3, so a
// little stricter) a key's ':' may be from its opening quote.
const maxSimpleKey = 1024

// value reads one value at p.i; nil means not JSON (or a key twice).
func (p *jsonParser) value(depth int) *yaml.Node {
	if p.skipSpace(); p.i >= len(p.data) || depth > maxJSONDepth {
		return nil
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.container(depth, '}', &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
	case c == '[':
		return p.container(depth, ']', &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"})
	case c == '"':
		if v, ok := p.str(); ok {
			return scalar("!!str", v)
		}
		return nil
	case c == '-' || c >= '0' && c <= '9':
		if v, ok := p.number(); ok {
			return scalar(numberTag(v), v)
		}
		return nil
	}
	for _, lit := range [...]struct{ word, tag string }{{"true", "!!bool"}, {"false", "!!bool"}, {"null", "!!null"}} {
		if bytes.HasPrefix(p.data[p.i:], []byte(lit.word)) {
			p.i += len(lit.word)
			return scalar(lit.tag, lit.word)
		}
	}
	return nil
}

// container reads an object or an array; p.i is at its opening bracket.
func (p *jsonParser) container(depth int, end byte, n *yaml.Node) *yaml.Node {
	p.i++
	if p.skipSpace(); p.i < len(p.data) && p.data[p.i] == end {
		p.i++
		return n
	}
	for {
		if n.Kind == yaml.MappingNode {
			if p.skipSpace(); p.i >= len(p.data) || p.data[p.i] != '"' {
				return nil
			}
			start := p.i
			key, ok := p.str()
			if !ok {
				return nil
			}
			for j := 0; j < len(n.Content); j += 2 {
				if n.Content[j].Value == key {
					return nil // YAML refuses a key twice; let it say so
				}
			}
			// A key is YAML's simple key: its ':' on the same line, at most
			// 1024 characters from its start, or YAML refuses the document.
			for p.i < len(p.data) && p.data[p.i] == ' ' {
				p.i++
			}
			if p.i >= len(p.data) || p.data[p.i] != ':' || p.i-start > maxSimpleKey {
				return nil
			}
			p.i++
			n.Content = append(n.Content, scalar("!!str", key))
		}
		e := p.value(depth + 1)
		if e == nil {
			return nil
		}
		n.Content = append(n.Content, e)
		if p.skipSpace(); p.i >= len(p.data) {
			return nil
		}
		switch p.data[p.i] {
		case ',':
			p.i++
		case end:
			p.i++
			return n
		default:
			return nil
		}
	}
}

// str reads a string at p.i (at its quote); escapes go through
// encoding/json, as they are rare in a stored app.
func (p *jsonParser) str() (string, bool) {
	start, escaped := p.i, false
	for p.i++; p.i < len(p.data); p.i++ {
		switch c := p.data[p.i]; {
		case c == '\\':
			escaped = true
			p.i++
			if p.i < len(p.data) && p.data[p.i] == '/' {
				return "", false // JSON's \/ is an escape YAML does not know
			}
		case c < 0x20:
			return "", false
		case c == '"':
			p.i++
			raw := p.data[start:p.i]
			if !escaped {
				return string(raw[1 : len(raw)-1]), true
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", false
			}
			return v, true
		}
	}
	return "", false
}

// number reads a number at p.i by JSON's grammar: -?int frac? exp?
func (p *jsonParser) number() (string, bool) {
	start := p.i
	if p.data[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.data) && p.data[p.i] == '0':
		p.i++
	case !p.digits():
		return "", false
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if !p.digits() {
			return "", false
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return "", false
		}
	}
	return string(p.data[start:p.i]), true
}

// digits skips one or more digits; false if there is none.
func (p *jsonParser) digits() bool {
	start := p.i
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

func (p *jsonParser) skipSpace() {
	for p.i < len(p.data) && (p.data[p.i] == ' ' || p.data[p.i] == '\n' || p.data[p.i] == '\r') {
		p.i++
	}
}

func scalar(tag, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

// numberTag is the tag yaml.v3 resolves a JSON number to: an integer that
// fits 64 bits is !!int, a float that fits !!float, anything else (1e999)
// a string, so a field's "not a valid int" stays what it was.
func numberTag(s string) string {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return "!!int"
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return "!!int"
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return "!!float"
	}
	return "!!str"
}

// yamlReadable reports whether yaml.v3's reader takes every character of
// data: valid UTF-8 of newline, carriage return and the printable ranges
// (its yaml_parser_update_buffer check, less the tab).
func yamlReadable(data []byte) bool {
	for i := 0; i < len(data); {
		c := rune(data[i])
		if c < utf8.RuneSelf {
			// A tab is a character YAML reads, but not where JSON may
			// put one (indentation); json.Marshal never writes one.
			if c < 0x20 && c != '\n' && c != '\r' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return false
		case r == 0x85, r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000:
		default:
			return false
		}
		i += size
	}
	return true
}
