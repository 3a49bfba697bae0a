package limits

import (
	"slices"
	"strings"

	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

// ShadowSet is a set of shadowable refusal reasons, a bit per entry of
// reply.Shadowable (path order). A gate's is its limits.shadow;
// a request's is what its shadowed limits would have refused. The zero
// value is empty, and an empty gate set costs one comparison, only where
// a limit would refuse.
type ShadowSet uint16

// NewShadowSet returns the set of validated limits.shadow reasons.
func NewShadowSet(s []string) ShadowSet {
	var set ShadowSet
	for _, r := range s {
		set |= ShadowBit(r)
	}
	return set
}

// ShadowBit is reason's bit; 0 for a reason that is never shadowed.
func ShadowBit(reason string) ShadowSet {
	if i := slices.Index(reply.Shadowable, reason); i >= 0 {
		return 1 << i
	}
	return 0
}

// Has reports whether reason is in s.
func (s ShadowSet) Has(reason string) bool { return s != 0 && s&ShadowBit(reason) != 0 }

// Header is the Levee-Shadow value: the reasons, comma-separated, in path
// order; "" for none.
func (s ShadowSet) Header() string {
	if s == 0 {
		return ""
	}
	var b strings.Builder
	for i, r := range reply.Shadowable {
		if s&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(r)
		}
	}
	return b.String()
}

// Shadows reports whether g shadows reason; if so it counts the request
// as shadowed for it, and the caller lets it through, marked with got.
func (g *Gate) Shadows(reason string) (got ShadowSet, ok bool) {
	if !g.Shadow.Has(reason) {
		return 0, false
	}
	g.Count.Shadowed(reason)
	return ShadowBit(reason), true
}

// shadowShape is checkShape for a gate that shadows some reason: each
// check on its own, so a shadowed violation lets the next check run. It
// returns the first violation not shadowed (nil: none) and the reasons
// shadowed before it.
func (g *Gate) shadowShape(sh *PathShape, target string, headerCount, headerBytes int) (*shape.Violation, ShadowSet) {
	c := sh.Check
	_, query, _ := strings.Cut(target, "?")
	var marks ShadowSet
	for _, v := range [...]*shape.Violation{c.CheckURL(target), c.CheckQuery(query),
		c.CheckHeaders(headerCount, 0), c.CheckHeaders(0, headerBytes)} {
		if v == nil {
			continue
		}
		got, ok := g.Shadows(string(v.Reason))
		if !ok {
			return v, marks
		}
		marks |= got
	}
	return nil, marks
}

// ShadowBatch counts the batch items of a body read whole ahead (head) for
// a gate that shadows a batch reason. It returns the checker the body's
// reader is still to enforce: nil when the body passed or its violation is
// shadowed (counted, and marked in the returned set); sh's own when the
// violation is not shadowed, so that it is refused as it would be without
// shadow. A body not read whole is not counted: the reader gets nil, and a
// shadowed limit refuses nothing.
func (g *Gate) ShadowBatch(sh *PathShape, head []byte, whole bool) (*shape.Checker, ShadowSet) {
	bc := sh.Check.BatchCounter()
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
	got, ok := g.Shadows(string(v.Reason))
	if !ok {
		return sh.Check, 0
	}
	return nil, got
}

// The bits the gate tests; fixed once config's vocabulary is.
var (
	BatchShadows     = ShadowBit(string(shape.BatchItems)) | ShadowBit(string(shape.BatchJSON)) | ShadowBit(string(shape.BatchShape))
	bodyShadow       = ShadowBit(reply.Body)
	appRateShadow    = ShadowBit(reply.Rate)
	clientRateShadow = ShadowBit(reply.ClientRate)
)

// UnlimitedBody is the body limit enforced while streaming when
// limits.body is shadowed: a body that streams past what was read ahead is
// let through uncounted (its headers have gone on already).
const UnlimitedBody = 1 << 62

// BodyLimit is limits.body as a body's reader enforces it.
func (g *Gate) BodyLimit(sh *PathShape) int64 {
	if g.Shadow&bodyShadow != 0 {
		return UnlimitedBody
	}
	return sh.Body
}
