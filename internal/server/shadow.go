package server

import (
	"slices"
	"strings"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/shape"
)

// shadowSet is a set of shadowable refusal reasons, a bit per entry of
// config.ShadowableReasons (path order). A route's is its limits.shadow;
// a request's is what its shadowed limits would have refused. The zero
// value is empty, and an empty route set costs one comparison, only where
// a limit would refuse.
type shadowSet uint16

func init() {
	if len(config.ShadowableReasons) > 16 {
		panic("server: shadowSet holds 16 reasons")
	}
}

func newShadowSet(s config.Shadow) shadowSet {
	var set shadowSet
	for _, r := range s {
		set |= shadowBit(r)
	}
	return set
}

// shadowBit is reason's bit; 0 for a reason that is never shadowed.
func shadowBit(reason string) shadowSet {
	if i := slices.Index(config.ShadowableReasons, reason); i >= 0 {
		return 1 << i
	}
	return 0
}

func (s shadowSet) has(reason string) bool { return s != 0 && s&shadowBit(reason) != 0 }

// header is the Levee-Shadow value: the reasons, comma-separated, in path
// order; "" for none.
func (s shadowSet) header() string {
	if s == 0 {
		return ""
	}
	var b strings.Builder
	for i, r := range config.ShadowableReasons {
		if s&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(r)
		}
	}
	return b.String()
}

// shadows reports whether rt shadows reason; if so it counts the request
// as shadowed for it, and the caller lets it through, marked with got.
func (rt *route) shadows(reason string) (got shadowSet, ok bool) {
	if !rt.shadow.has(reason) {
		return 0, false
	}
	rt.app.metrics.Shadowed(reason)
	return shadowBit(reason), true
}

// shadowShape is checkShape for a route that shadows some reason: each
// check on its own, so a shadowed violation lets the next check run. It
// returns the first violation not shadowed (nil: none) and the reasons
// shadowed before it.
func (rt *route) shadowShape(sh *pathShape, target string, headerCount, headerBytes int) (*shape.Violation, shadowSet) {
	c := sh.check
	_, query, _ := strings.Cut(target, "?")
	var marks shadowSet
	for _, v := range [...]*shape.Violation{c.CheckURL(target), c.CheckQuery(query),
		c.CheckHeaders(headerCount, 0), c.CheckHeaders(0, headerBytes)} {
		if v == nil {
			continue
		}
		got, ok := rt.shadows(string(v.Reason))
		if !ok {
			return v, marks
		}
		marks |= got
	}
	return nil, marks
}

// shadowBatch counts the batch items of a body read whole ahead (head) for
// a route that shadows a batch reason. It returns the checker forward is
// still to enforce: nil when the body passed or its violation is shadowed
// (counted, and marked in the returned set); sh's own when the violation
// is not shadowed, so that forward refuses it as it would without shadow.
// A body that streams past request_buffer is not counted: forward gets nil,
// and a shadowed limit refuses nothing.
func (rt *route) shadowBatch(sh *pathShape, head []byte, whole bool) (*shape.Checker, shadowSet) {
	bc := sh.check.BatchCounter()
	if bc == nil || !whole || len(head) == 0 {
		return nil, 0
	}
	v := bc.Write(head)
	if v == nil {
		v = bc.End()
	}
	if v == nil {
		return nil, 0
	}
	got, ok := rt.shadows(string(v.Reason))
	if !ok {
		return sh.check, 0
	}
	return nil, got
}

// The bits serve and the rate limits test; fixed once config's vocabulary is.
var (
	batchShadows     = shadowBit(string(shape.BatchItems)) | shadowBit(string(shape.BatchJSON)) | shadowBit(string(shape.BatchShape))
	bodyShadow       = shadowBit(reasonBody)
	appRateShadow    = shadowBit(reasonRate)
	clientRateShadow = shadowBit(reasonClientRate)
)

// unlimitedBody is the body limit forward enforces while streaming when
// limits.body is shadowed: a body that streams past request_buffer is let
// through uncounted (its headers have gone to the backend already).
const unlimitedBody = 1 << 62

// bodyLimit is limits.body as forward and the read ahead enforce it.
func (rt *route) bodyLimit(sh *pathShape) int64 {
	if rt.shadow&bodyShadow != 0 {
		return unlimitedBody
	}
	return sh.body
}
