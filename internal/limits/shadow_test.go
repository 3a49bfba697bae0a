package limits

import (
	"testing"

	"github.com/leveeproxy/levee/internal/reply"
)

// A ShadowSet holds a bit per shadowable reason: a reason added to the
// reply table's Shadowable beyond its width fails here, not at run time.
func TestShadowSetHoldsEveryShadowableReason(t *testing.T) {
	for i, r := range reply.Shadowable {
		if i >= 16 || ShadowBit(r) == 0 {
			t.Errorf("%s (bit %d): a ShadowSet holds 16 reasons", r, i)
		}
	}
}
