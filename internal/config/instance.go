package config

import "path/filepath"

// Instance says how levee keeps to one active instance per host and config
// (see docs/deploy.md).
type Instance struct {
	// Lock is the lock file marking the active instance. Empty means one
	// derived from the config file's absolute path (under /run/levee when
	// that directory is writable, else the temporary directory).
	Lock string `yaml:"lock"`
	// Unexpected is what a second instance does when the lock is held:
	// UnexpectedRefuse (exit non-zero) or UnexpectedStrict (serve with every
	// limit scaled to StrictFraction).
	Unexpected string `yaml:"unexpected"`
	// StrictFraction scales every concurrency, rate, client rate and
	// bandwidth limit of an unexpected instance (at least 1 of each).
	StrictFraction Percent `yaml:"strict_fraction"`
}

// What an unexpected instance does.
const (
	UnexpectedRefuse = "refuse"
	UnexpectedStrict = "strict"
)

// DefaultStrictFraction is instance.strict_fraction's default.
const DefaultStrictFraction = 10

// DefaultInstance returns the instance section's defaults.
func DefaultInstance() Instance {
	return Instance{Unexpected: UnexpectedRefuse, StrictFraction: DefaultStrictFraction}
}

func (in *Instance) validate(errs *Errors) {
	if in.Lock != "" && !filepath.IsAbs(in.Lock) {
		errs.add("instance.lock", "must be an absolute path (got %q)", in.Lock)
	}
	switch in.Unexpected {
	case UnexpectedRefuse, UnexpectedStrict:
	default:
		errs.add("instance.unexpected", "must be refuse or strict (got %q)", in.Unexpected)
	}
	within(errs, "instance.strict_fraction", int(in.StrictFraction), 1, 100)
}
