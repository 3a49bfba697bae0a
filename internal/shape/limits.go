package shape

import (
	"errors"
	"fmt"
)

// Limits are the shape limits of one route. A zero field turns its check
// off. Sizes are in bytes.
type Limits struct {
	// MaxHeaderBytes caps the sum of len(name)+len(value) over all header
	// fields (no separators, no request line).
	MaxHeaderBytes int
	// MaxHeaderCount caps the number of header fields; a field repeated
	// counts once per occurrence.
	MaxHeaderCount int
	// MaxURLBytes caps the length of the request target as sent (path and
	// query, or the absolute form).
	MaxURLBytes int
	// MaxQueryValues caps the number of non-empty '&'-separated query
	// parameters.
	MaxQueryValues int
	// Batch caps the items of a top-level JSON array field of the body.
	Batch Batch
}

// Batch declares a JSON batch field: the body is a JSON object whose
// JSONField is an array of at most Max items. The zero value is off; a
// Batch that is on has both a field and a Max ≥ 1.
type Batch struct {
	JSONField string
	Max       int
}

// On reports whether the batch limit is set.
func (b Batch) On() bool { return b.JSONField != "" && b.Max > 0 }

// Validate reports every field that holds a value no check can enforce:
// a negative limit, or a Batch with a field but no Max (or a Max but no
// field). It never replaces a value.
func (l Limits) Validate() error {
	var errs []error
	nonNegative := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("shape: %s: must be ≥ 0 (got %d)", name, v))
		}
	}
	nonNegative("MaxHeaderBytes", l.MaxHeaderBytes)
	nonNegative("MaxHeaderCount", l.MaxHeaderCount)
	nonNegative("MaxURLBytes", l.MaxURLBytes)
	nonNegative("MaxQueryValues", l.MaxQueryValues)
	switch b := l.Batch; {
	case b.Max < 0:
		errs = append(errs, fmt.Errorf("shape: Batch.Max: must be ≥ 0 (got %d)", b.Max))
	case b.JSONField != "" && b.Max == 0:
		errs = append(errs, fmt.Errorf("shape: Batch.Max: must be ≥ 1 when Batch.JSONField is set (%q)", b.JSONField))
	case b.JSONField == "" && b.Max != 0:
		errs = append(errs, errors.New("shape: Batch.JSONField: must be set when Batch.Max is set"))
	}
	return errors.Join(errs...)
}
