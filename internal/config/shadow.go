package config

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/reply"
)

// Shadow is the set of refusal reasons an app counts instead of refusing
// (limits.shadow): a request one of them would refuse goes on to the
// backend, marked Levee-Shadow. Written `true` (every shadowable reason),
// `false`, or a list of reasons. The zero value shadows nothing.
type Shadow []string

// Has reports whether reason is shadowed.
func (s Shadow) Has(reason string) bool { return slices.Contains(s, reason) }

func (s *Shadow) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var all bool
		if err := n.Decode(&all); err != nil {
			errs.add(path, "%q is not a valid bool", n.Value)
			return
		}
		*s = nil
		if all {
			*s = slices.Clone(reply.Shadowable)
		}
		return
	}
	if n.Kind != yaml.SequenceNode {
		errs.add(path, "want true, false or a list of refusal reasons, got %s", kindName(n))
		return
	}
	var names []string
	decodeValue(n, reflect.ValueOf(&names).Elem(), path, errs)
	*s = names
}

// neverShadowed says why each refusal that protects levee, the backends or
// the protocol cannot be shadowed.
var neverShadowed = func() map[string]string {
	m := map[string]string{}
	for _, r := range admit.Reasons {
		m[string(r)] = whyAdmission
		m[backendPrefix+string(r)] = whyBackend // internal/protect's reasons
	}
	m[backendPrefix+"rate"], m[backendPrefix+"share"] = whyBackend, whyBackend
	maps.Copy(m, neverShadowedOthers)
	return m
}()

// backendPrefix starts the reasons of backend_limits (protect.Prefix).
const backendPrefix = "backend-"

var neverShadowedOthers = map[string]string{
	"max-conns":           "the connection limits protect levee itself",
	"conns-per-ip":        "the connection limits protect levee itself",
	"min-rate":            whySlow,
	"request-timeout":     whySlow,
	"bandwidth":           "limits.bandwidth paces bytes rather than refusing requests; its cut bounds how long a slow transfer holds its slot",
	"bad-request-body":    whyFraming,
	"bad-request":         whyFraming,
	"bad-header":          whyFraming,
	"bad-framing":         whyFraming,
	"bad-target":          whyFraming,
	"bad-host":            whyFraming,
	"header-too-large":    whyFraming,
	"catalog-busy":        "the catalog loader's limits protect levee itself",
	"catalog-unavailable": "the catalog loader's limits protect levee itself",
}

const (
	whyAdmission = "the concurrency and queue limits protect levee itself"
	whySlow      = "a slow client would hold levee's connections and buffers"
	whyFraming   = "a request levee cannot read unambiguously is refused for security"
	whyBackend   = "backend_limits protect the app's backends"
)

// MarshalYAML writes a Shadow that shadows nothing as false, the form
// of its default.
func (s Shadow) MarshalYAML() (any, error) {
	if len(s) == 0 {
		return false, nil
	}
	return []string(s), nil
}

// validate refuses a reason that is unknown, listed twice, or one that
// must always refuse, saying why.
func (s Shadow) validate(errs *Errors, path string) {
	for i, r := range s {
		why, never := neverShadowed[r]
		switch {
		case never:
			errs.add(path, "%q is never shadowed: %s", r, why)
		case !slices.Contains(reply.Shadowable, r):
			errs.add(path, "%q is not a refusal reason that can be shadowed (want true, or some of: %s)",
				r, strings.Join(reply.Shadowable, ", "))
		case slices.Contains(s[:i], r):
			errs.add(path, "%q is listed twice", r)
		}
	}
}
