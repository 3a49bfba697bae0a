package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as a Go duration string ("50ms", "2s").
// A bare number is an error: a unit is always required, except for 0.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses "50ms", "1m30s" and the like.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration like 50ms, got a %s", kindName(n))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in its string form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ParseDuration parses a duration that must carry a unit ("50ms", "1m30s");
// only zero may be written bare ("0").
func ParseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want e.g. 50ms, 2s, 1m)", s)
	}
	return v, nil
}

// ByteSize is a number of bytes, written as "10MB", "64KiB" or a plain integer.
// KB, MB, GB are powers of 1000; KiB, MiB, GiB powers of 1024 (suffixes are case-insensitive).
type ByteSize int64

// UnmarshalYAML parses "10MB", "512KiB", "4096".
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a size like 10MB, got a %s", kindName(n))
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = ByteSize(v)
	return nil
}

// MarshalYAML writes the size as a plain byte count.
func (b ByteSize) MarshalYAML() (any, error) { return int64(b), nil }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{ // longest suffixes first so "KiB" is not read as "B"
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1000}, {"m", 1000 * 1000}, {"g", 1000 * 1000 * 1000},
	{"b", 1},
}

// ParseByteSize parses a byte size such as "10MB", "64KiB" or "4096".
func ParseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (want e.g. 4096, 64KB, 10MB, 1GiB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	default:
		return "node"
	}
}
