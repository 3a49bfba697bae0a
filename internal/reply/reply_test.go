package reply

import (
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/netlimit"
	"github.com/leveeproxy/levee/internal/protect"
)

// A hint rounds up to whole seconds, at least 1.
func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 90 * time.Second: 90} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// Every reason a step refuses with has its row: admission's, and the
// same prefixed for backend_limits' pool, answer 503 with the step's own
// hint; a connection refused at accept carries the table's hint, since
// no step is there to give one.
func TestEveryStepsReasonHasARow(t *testing.T) {
	want := map[string]int{Rate: 429, ClientRate: 429, string(protect.ReasonRate): 503, string(protect.ReasonShare): 503,
		CatalogBusy: 503, CatalogUnavailable: 503}
	for _, r := range admit.Reasons {
		want[string(r)], want[protect.Prefix+string(r)] = 503, 503
	}
	for reason, status := range want {
		if table[reason] == nil || For(reason).Status != status || For(reason).Header != Reject {
			t.Errorf("%s: in the table %v, %+v; want status %d with %s", reason, table[reason] != nil, For(reason), status, Reject)
		}
	}
	for _, reason := range []string{netlimit.MaxConns, netlimit.ConnsPerIP} {
		if table[reason] == nil || For(reason).RetryAfter <= 0 || !strings.Contains(string(Raw(reason)), "Retry-After: 1\r\n") {
			t.Errorf("%s: a refusal at accept must carry the table's Retry-After: %q", reason, Raw(reason))
		}
	}
	if len(table) != len(rows) {
		t.Errorf("%d rows make %d replies: a reason has two rows", len(rows), len(table))
	}
}

// A row's defaults are filled: a limit's refusal says which in
// Levee-Reject and in its body.
func TestRowDefaults(t *testing.T) {
	r := For(Rate)
	if r.Header != Reject || r.Body != "levee: rejected: rate\n" || string(r.ReasonBytes()) != Rate {
		t.Errorf("rate: %+v", r)
	}
	if !BodyCutReply.Close || BodyReply.Close || BodyCutReply.Reason != Body {
		t.Errorf("body: the cut-off reply closes, the declared one keeps the connection: %+v %+v", BodyCutReply, BodyReply)
	}
}
