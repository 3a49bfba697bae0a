package config

import (
	"log/slog"
	"math"
	"time"

	"go.yaml.in/yaml/v3"
)

// AccessLog is log.access: false (off), true (every request), or
// {sample: R}, a line for each request with probability R in (0, 1].
type AccessLog struct {
	// Sample is the share of requests logged; 0 is off.
	Sample float64 `yaml:"sample"`
}

// On reports whether any request is logged.
func (a AccessLog) On() bool { return a.Sample > 0 }

func (a *AccessLog) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	var on bool
	a.Sample = 0
	decodeShorthand(n, path, errs, a, &on)
	if on {
		a.Sample = 1
	}
	if resolve(n).Kind == yaml.MappingNode && !(a.Sample > 0) {
		// {sample: 0} is not how to turn it off: false says so plainly.
		errs.add(join(path, "sample"), "must be > 0 and <= 1 (got %v); write log.access: false to turn it off", a.Sample)
	}
}

// MarshalYAML writes the shortest form: false, true or {sample: R}.
func (a AccessLog) MarshalYAML() (any, error) {
	switch a.Sample {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return struct {
		Sample float64 `yaml:"sample"`
	}{a.Sample}, nil
}

func (a AccessLog) validate(errs *Errors) {
	if math.IsNaN(a.Sample) || a.Sample < 0 || a.Sample > 1 {
		errs.add("log.access.sample", "must be > 0 and <= 1 (got %v)", a.Sample)
	}
}

// DefaultLog returns the log section's defaults.
func DefaultLog() Log {
	return Log{Level: "info", Format: "text", ErrorsPerSecond: DefaultErrorsPerSecond,
		ErrorsPerEvent: DefaultErrorsPerEvent, ErrorsInterval: Duration(DefaultErrorsInterval)}
}

// SlogLevel is log.level as slog's (validated, so never a parse error).
func (l Log) SlogLevel() slog.Level {
	var v slog.Level
	_ = v.UnmarshalText([]byte(l.Level)) // validated
	return v
}

func (l *Log) validate(errs *Errors) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		errs.add("log.level", "must be debug, info, warn or error (got %q)", l.Level)
	}
	switch l.Format {
	case "text", "json":
	default:
		errs.add("log.format", "must be text or json (got %q)", l.Format)
	}
	l.Access.validate(errs)
	within(errs, "log.errors_per_second", l.ErrorsPerSecond, 1, 100_000)
	within(errs, "log.errors_per_event", l.ErrorsPerEvent, 1, 10_000)
	if d := l.ErrorsInterval.D(); d < time.Second || d > time.Hour {
		errs.add("log.errors_interval", "must be 1s..1h (got %s)", d)
	}
}
