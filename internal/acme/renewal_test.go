package acme

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"
)

// 10,000 certificates issued at one instant renew each at its own time
// within [7/12, 2/3) of their life: never later than two thirds, and
// spread so that no hour of the window takes more than a few times the
// even share.
func TestRenewalSpread(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	life := 90 * 24 * time.Hour
	from, to := issued.Add(life*7/12), issued.Add(life*2/3)
	perHour := map[int64]int{}
	const n = 10_000
	for i := range n {
		leaf := &x509.Certificate{DNSNames: []string{fmt.Sprintf("app%d.example.com", i)},
			NotBefore: issued, NotAfter: issued.Add(life)}
		at := renewalAt(leaf)
		if at.Before(from) || !at.Before(to) {
			t.Fatalf("%s renews at %s, outside [%s, %s)", leaf.DNSNames[0], at, from, to)
		}
		if again := renewalAt(leaf); !again.Equal(at) {
			t.Fatal("a name's renewal time is not fixed")
		}
		perHour[at.Unix()/3600]++
	}
	hours := int(to.Sub(from) / time.Hour) // 180
	even := n / hours
	for h, c := range perHour {
		if c > 3*even {
			t.Errorf("hour %d takes %d renewals; the even share is %d", h, c, even)
		}
	}
	if len(perHour) < hours*9/10 {
		t.Errorf("renewals fall in %d hours of %d", len(perHour), hours)
	}
}
