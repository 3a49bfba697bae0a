package config

import (
	"reflect"
	"strings"
)

// ParseLimits decodes and validates data as one limits mapping, the
// `limits:` section of an app, with the same keys, defaults and checks;
// errors name their field path from "limits" (limits.rate, ...). An empty
// document is the default limits.
func ParseLimits(data []byte) (Limits, error) {
	const p = "limits"
	root, err := parseDocument(data)
	if err != nil {
		return Limits{}, Errors{{Path: p, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	l := DefaultApp().Limits
	var errs Errors
	if root != nil && !isNull(resolve(root)) {
		decodeValue(root, reflect.ValueOf(&l).Elem(), p, &errs)
	}
	var verrs Errors
	validateLimits(&verrs, p, l)
	for _, e := range verrs {
		if !covered(errs, e.Path) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return Limits{}, errs
	}
	return l, nil
}

// ValidateLimits checks limits made in Go rather than decoded (package
// admission's typed Limits), as ParseLimits checks a decoded section: the
// same rules, errors under the path "limits".
func ValidateLimits(l Limits) error {
	var errs Errors
	validateLimits(&errs, "limits", l)
	if len(errs) > 0 {
		return errs
	}
	return nil
}
