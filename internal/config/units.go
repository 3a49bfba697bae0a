package config

import (
	"fmt"
	"math"
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

// Rate is a number of events per unit of time, written "750/s", "100/m", "10/h" or "0.5/s":
// a positive decimal number (digits with an optional fraction, no sign or exponent), a slash
// and one of the units s, m, h. It must lie between one event a day and 1e9 events a second.
//
// The zero Rate is unset: PerSecond and Interval return 0 and String returns "". Config
// validation, not this type, decides whether a field may be unset.
type Rate struct {
	Events float64       // events per Per; > 0 in a parsed Rate
	Per    time.Duration // time.Second, time.Minute or time.Hour in a parsed Rate
}

// Bounds of a parsed Rate.
const (
	MaxRatePerSecond = 1e9 // an emission interval of 1ns
	MinRatePerSecond = 1.0 / 86400
)

var rateUnits = []struct {
	name string
	per  time.Duration
}{{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}}

// ParseRate parses a rate such as "750/s", "100/m", "10/h" or "0.5/s".
// Surrounding spaces and spaces around the slash are allowed.
func ParseRate(s string) (Rate, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	num, unit = strings.TrimSpace(num), strings.TrimSpace(unit)
	if !ok || !isDecimal(num) {
		return Rate{}, fmt.Errorf("%q is not a rate (want e.g. 750/s, 100/m, 10/h, 0.5/s)", s)
	}
	var per time.Duration
	for _, u := range rateUnits {
		if unit == u.name {
			per = u.per
		}
	}
	if per == 0 {
		return Rate{}, fmt.Errorf("%q is not a rate: the unit after / must be s, m or h", s)
	}
	// Only a range error is possible for a decimal: +Inf on overflow (too large below),
	// 0 on underflow (not greater than 0 below).
	v, _ := strconv.ParseFloat(num, 64)
	r := Rate{Events: v, Per: per}
	switch ps := r.PerSecond(); {
	case v == 0:
		return Rate{}, fmt.Errorf("%q is not a rate: it must be greater than 0", s)
	case ps > MaxRatePerSecond:
		return Rate{}, fmt.Errorf("%q is too large: at most 1e9 per second", s)
	case ps < MinRatePerSecond:
		return Rate{}, fmt.Errorf("%q is too small: at least one per day", s)
	}
	return r, nil
}

// isDecimal reports whether s is digits with an optional fraction: 750, 0.5, 10.25.
func isDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	return allDigits(intPart) && (!hasDot || allDigits(frac))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// PerSecond returns the rate in events per second (0 for the zero Rate).
func (r Rate) PerSecond() float64 {
	if r.Per <= 0 || r.Events <= 0 {
		return 0
	}
	return r.Events / r.Per.Seconds()
}

// Interval returns the emission interval T = 1/rate, the time one event costs, rounded up
// to a whole nanosecond (at least 1ns) so that a limiter spacing events by T never admits
// more than the rate. A quotient within 1e-6ns of a whole number is taken as that number,
// so 4/s is exactly 250ms despite binary floating point. The zero Rate returns 0.
func (r Rate) Interval() time.Duration {
	if r.Per <= 0 || r.Events <= 0 {
		return 0
	}
	q := float64(r.Per) / r.Events
	if rq := math.Round(q); math.Abs(q-rq) < 1e-6 {
		q = rq
	} else {
		q = math.Ceil(q)
	}
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(time.Duration(q), 1)
}

// String returns the rate in the form ParseRate reads, e.g. "750/s"; "" for the zero Rate.
func (r Rate) String() string {
	for _, u := range rateUnits {
		if r.Per == u.per && r.Events > 0 {
			return strconv.FormatFloat(r.Events, 'f', -1, 64) + "/" + u.name
		}
	}
	if r == (Rate{}) {
		return ""
	}
	return fmt.Sprintf("%g/%s", r.Events, r.Per) // not produced by ParseRate
}

// UnmarshalYAML parses "750/s", "100/m", "10/h" and the like.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a rate like 750/s, got a %s", kindName(n))
	}
	if n.Value == "off" { // the zero Rate: no limit of this kind
		*r = Rate{}
		return nil
	}
	v, err := ParseRate(n.Value)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalYAML writes the rate in its string form.
func (r Rate) MarshalYAML() (any, error) {
	if r == (Rate{}) {
		return "off", nil
	}
	return r.String(), nil
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

// Percent is a whole percentage 0..100, written "50%" or 50.
type Percent int

// UnmarshalYAML parses "50%" or 50.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a percentage like 50%%, got a %s", kindName(n))
	}
	v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(n.Value), "%"))
	if err != nil || v < 0 || v > 100 {
		return fmt.Errorf("%q is not a percentage (want 0%%..100%%)", n.Value)
	}
	*p = Percent(v)
	return nil
}

// MarshalYAML writes the percentage as "50%".
func (p Percent) MarshalYAML() (any, error) { return strconv.Itoa(int(p)) + "%", nil }

// ByteRate is bytes per second, written "50MB/s" (a size per second), or
// "off" (0).
type ByteRate int64

// UnmarshalYAML parses "50MB/s", "512KiB/s" or "off".
func (b *ByteRate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a byte rate like 50MB/s, got a %s", kindName(n))
	}
	if n.Value == "off" {
		*b = 0
		return nil
	}
	size, ok := strings.CutSuffix(strings.TrimSpace(n.Value), "/s")
	v, err := ParseByteSize(size)
	if !ok || err != nil || v <= 0 {
		return fmt.Errorf("%q is not a byte rate (want e.g. 50MB/s, 512KiB/s, or off)", n.Value)
	}
	*b = ByteRate(v)
	return nil
}

// MarshalYAML writes the rate as bytes per second, or off.
func (b ByteRate) MarshalYAML() (any, error) {
	if b == 0 {
		return "off", nil
	}
	return strconv.FormatInt(int64(b), 10) + "/s", nil
}
