package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ReadImport reads a catalog import file: YAML with an apps: section (name
// ending in .yaml or .yml) or JSONL, one app a line with its "name"
// beside its other keys. Every app is validated; any problem fails it all.
func ReadImport(name string, r io.Reader) ([]AppSource, error) {
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		return ParseAppsYAML(data)
	}
	var out []AppSource
	var errs Errors
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		a, err := ParseAppJSON(b, line)
		if err != nil {
			var es Errors
			if errors.As(err, &es) {
				errs = append(errs, es...)
			} else {
				errs = append(errs, FieldError{Path: fmt.Sprintf("line %d", line), Msg: err.Error()})
			}
			continue
		}
		if prev, ok := seen[a.Name]; ok {
			errs = append(errs, FieldError{Path: fmt.Sprintf("line %d", line), Msg: fmt.Sprintf("app %s is already on line %d", a.Name, prev)})
			continue
		}
		seen[a.Name] = line
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// AppJSONLine is one line of a JSONL export: an app's stored config (a
// JSON object) with its "name" beside the other keys, and a newline. It
// is what ParseAppJSON reads back.
func AppJSONLine(name string, cfg []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &m); err != nil {
		return nil, fmt.Errorf("app %s: stored config: %w", name, err)
	}
	m["name"], _ = json.Marshal(name)
	line, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("app %s: %w", name, err)
	}
	return append(line, '\n'), nil
}
