package limits

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/ratelimit"
	"github.com/leveeproxy/levee/internal/reply"
)

// t0 is the start of every test's time line; Allow takes now, so no clock
// is needed.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// perSecond is n a second with burst, for n that divides a second.
func perSecond(n float64, burst int) ratelimit.Limit {
	return ratelimit.Limit{Interval: time.Duration(float64(time.Second) / n), Burst: burst}
}

// newTestRule is NewRule's rule of lim on a store of its own.
func newTestRule(t testing.TB, name, reason string, lim ratelimit.Limit) *Rule {
	t.Helper()
	rule := NewRule(name, reason, lim)
	if rule == nil {
		t.Fatalf("NewRule(%v) = nil", lim)
	}
	rule.Store = NewStore(1024)
	return rule
}

// noShadows shadows nothing and allocates nothing.
type noShadows struct{}

func (noShadows) Shadowed(*Rule) bool { return false }

// shadows shadows the rules in on and counts every Shadowed call per rule.
type shadows struct {
	on    map[*Rule]bool
	calls map[*Rule]int
}

func newShadows(on ...*Rule) *shadows {
	s := &shadows{on: map[*Rule]bool{}, calls: map[*Rule]int{}}
	for _, r := range on {
		s.on[r] = true
	}
	return s
}

func (s *shadows) Shadowed(r *Rule) bool {
	s.calls[r]++
	return s.on[r]
}

// refusal10 is the Decision of a 10/s burst 1 limit refusing 50ms after it
// admitted a request: the request would conform in 50ms, and the bucket is
// full again then.
var refusal10 = ratelimit.Decision{RetryAfter: 50 * time.Millisecond, Remaining: 0, Reset: 50 * time.Millisecond}

func TestAllowIsExactGCRA(t *testing.T) {
	type step struct {
		at      time.Duration // after t0
		refused bool
		d       ratelimit.Decision // of a refusal
	}
	// 10/s burst 1: T = 100ms. A refusal spends nothing, so the next request
	// conforms exactly one interval after the last admitted one.
	steps := []step{
		{at: 0},
		{at: 50 * time.Millisecond, refused: true, d: refusal10},
		{at: 100*time.Millisecond - time.Nanosecond, refused: true,
			d: ratelimit.Decision{RetryAfter: time.Nanosecond, Reset: time.Nanosecond}},
		{at: 100 * time.Millisecond},
		{at: 150 * time.Millisecond, refused: true, d: refusal10},
		{at: 200 * time.Millisecond},
		{at: 1 * time.Second}, // idle: still one at a time
		{at: 1 * time.Second, refused: true,
			d: ratelimit.Decision{RetryAfter: 100 * time.Millisecond, Reset: 100 * time.Millisecond}},
	}
	for _, tc := range []struct {
		name        string
		app, client bool
	}{{"app", true, false}, {"client", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var app, client, refuser *Rule
			if tc.client {
				client = newTestRule(t, "c", reply.ClientRate, perSecond(10, 1))
				refuser = client
			}
			if tc.app {
				app = newTestRule(t, "a", reply.Rate, perSecond(10, 1))
				refuser = app // peeked first
			}
			for _, s := range steps {
				got := Allow(app, client, "k", 1, t0.Add(s.at), noShadows{})
				want := Outcome{}
				if s.refused {
					want = Outcome{Refused: refuser, Decision: s.d}
				}
				if got != want {
					t.Fatalf("at +%v: Allow = %+v, want %+v", s.at, got, want)
				}
			}
		})
	}
}

func TestAllowBurstRefusal(t *testing.T) {
	// 10/s burst 3: three at once, then the fourth waits one interval, and
	// the bucket is full again after three.
	app := newTestRule(t, "a", reply.Rate, perSecond(10, 3))
	for i := range 3 {
		if o := Allow(app, nil, "", 1, t0, noShadows{}); o != (Outcome{}) {
			t.Fatalf("request %d: %+v, want allowed", i, o)
		}
	}
	want := Outcome{Refused: app, Decision: ratelimit.Decision{RetryAfter: 100 * time.Millisecond, Reset: 300 * time.Millisecond}}
	if o := Allow(app, nil, "", 1, t0, noShadows{}); o != want {
		t.Fatalf("fourth request: %+v, want %+v", o, want)
	}
}

// peek is the state of key under rule now, without counting anything.
func peek(rule *Rule, key string, now time.Time) ratelimit.Decision {
	return rule.Store.AllowAt(key, rule.Lim, now, 0)
}

func TestAllowClientRefusalSpendsNoAppBudget(t *testing.T) {
	app := newTestRule(t, "a", reply.Rate, perSecond(10, 2)) // T 100ms, room for 2
	client := newTestRule(t, "c", reply.ClientRate, perSecond(1, 1))
	if o := Allow(app, client, "a", 1, t0, noShadows{}); o != (Outcome{}) {
		t.Fatalf("first request: %+v", o)
	}
	now := t0.Add(10 * time.Millisecond)
	o := Allow(app, client, "a", 1, now, noShadows{})
	if o.Refused != client {
		t.Fatalf("client a again: %+v, want refused by the client limit", o)
	}
	// The app's bucket holds one request more: the refusal did not take it.
	if d := peek(app, AppKey, now); d.Remaining != 1 {
		t.Fatalf("app after a client refusal: %+v, want Remaining 1", d)
	}
	if o := Allow(app, client, "b", 1, now, noShadows{}); o != (Outcome{}) {
		t.Fatalf("client b: %+v, want allowed on the app budget the refusal left", o)
	}
	if o := Allow(app, client, "c", 1, now, noShadows{}); o.Refused != app {
		t.Fatalf("client c: %+v, want refused by the app limit", o)
	}
}

func TestAllowAppRefusalSpendsNoClientBudget(t *testing.T) {
	app := newTestRule(t, "a", reply.Rate, perSecond(10, 1))
	client := newTestRule(t, "c", reply.ClientRate, perSecond(1, 1)) // T 1s
	if o := Allow(app, client, "x", 1, t0, noShadows{}); o != (Outcome{}) {
		t.Fatalf("first request: %+v", o)
	}
	now := t0.Add(50 * time.Millisecond)
	if o := Allow(app, client, "a", 1, now, noShadows{}); o != (Outcome{Refused: app, Decision: refusal10}) {
		t.Fatalf("client a while the app is full: %+v, want refused by the app", o)
	}
	if d := peek(client, "a", now); d != (ratelimit.Decision{Allowed: true, Remaining: 1}) {
		t.Fatalf("client a after an app refusal: %+v, want untouched", d)
	}
	// Had the refusal spent a's budget, a would wait a second.
	if o := Allow(app, client, "a", 1, t0.Add(100*time.Millisecond), noShadows{}); o != (Outcome{}) {
		t.Fatalf("client a once the app has room: %+v, want allowed", o)
	}
}

func TestAllowNoRules(t *testing.T) {
	s := newShadows()
	for i := range 100 {
		if o := Allow(nil, nil, "k", 1, t0, s); o != (Outcome{}) {
			t.Fatalf("request %d: %+v", i, o)
		}
	}
	if len(s.calls) != 0 {
		t.Fatalf("Shadowed called %v with no rules", s.calls)
	}
}

func TestAllowShadowed(t *testing.T) {
	// Both rules 10/s burst 1; "full" ones admitted a request at t0, and the
	// request comes at t0+50ms.
	const (
		unspent = iota // full, and still as it was: one due in 50ms
		fresh          // never used
		spent          // fresh, and admitted this request
	)
	state := map[int]ratelimit.Decision{
		unspent: {Allowed: true, Reset: 50 * time.Millisecond},
		fresh:   {Allowed: true, Remaining: 1},
		spent:   {Allowed: true, Reset: 100 * time.Millisecond},
	}
	for _, tc := range []struct {
		name                    string
		appFull, clientFull     bool
		shadowApp, shadowClient bool
		want                    func(app, client *Rule) Outcome
		appCalls, clientCalls   int
		appAfter, clientAfter   int
	}{
		{name: "app shadowed", appFull: true, shadowApp: true,
			want:     func(_, _ *Rule) Outcome { return Outcome{ShadowedApp: true} },
			appCalls: 1, appAfter: unspent, clientAfter: spent},
		{name: "client shadowed", clientFull: true, shadowClient: true,
			want:        func(_, _ *Rule) Outcome { return Outcome{ShadowedClient: true} },
			clientCalls: 1, appAfter: spent, clientAfter: unspent},
		{name: "both shadowed", appFull: true, clientFull: true, shadowApp: true, shadowClient: true,
			want:     func(_, _ *Rule) Outcome { return Outcome{ShadowedApp: true, ShadowedClient: true} },
			appCalls: 1, clientCalls: 1, appAfter: unspent, clientAfter: unspent},
		{name: "app shadowed, client refuses", appFull: true, clientFull: true, shadowApp: true,
			want: func(_, client *Rule) Outcome {
				return Outcome{Refused: client, Decision: refusal10, ShadowedApp: true}
			},
			appCalls: 1, clientCalls: 1, appAfter: unspent, clientAfter: unspent},
		{name: "client shadowed, app refuses first", appFull: true, clientFull: true, shadowClient: true,
			want:     func(app, _ *Rule) Outcome { return Outcome{Refused: app, Decision: refusal10} },
			appCalls: 1, appAfter: unspent, clientAfter: unspent},
		{name: "client shadowed, client has room, app refuses", appFull: true, shadowClient: true,
			want:     func(app, _ *Rule) Outcome { return Outcome{Refused: app, Decision: refusal10} },
			appCalls: 1, appAfter: unspent, clientAfter: fresh},
		{name: "both shadowed, neither refuses", shadowApp: true, shadowClient: true,
			want:     func(_, _ *Rule) Outcome { return Outcome{} },
			appAfter: spent, clientAfter: spent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newTestRule(t, "a", reply.Rate, perSecond(10, 1))
			client := newTestRule(t, "c", reply.ClientRate, perSecond(10, 1))
			if tc.appFull {
				app.Store.AllowAt(AppKey, app.Lim, t0, 1)
			}
			if tc.clientFull {
				client.Store.AllowAt("k", client.Lim, t0, 1)
			}
			var on []*Rule
			if tc.shadowApp {
				on = append(on, app)
			}
			if tc.shadowClient {
				on = append(on, client)
			}
			s := newShadows(on...)
			now := t0.Add(50 * time.Millisecond)
			if got, want := Allow(app, client, "k", 1, now, s), tc.want(app, client); got != want {
				t.Errorf("Allow = %+v, want %+v", got, want)
			}
			// The Shadower counts each refusal: it is asked once per refusing rule.
			if s.calls[app] != tc.appCalls || s.calls[client] != tc.clientCalls {
				t.Errorf("Shadowed calls: app %d, client %d; want %d, %d",
					s.calls[app], s.calls[client], tc.appCalls, tc.clientCalls)
			}
			if d := peek(app, AppKey, now); d != state[tc.appAfter] {
				t.Errorf("app state after: %+v, want %+v", d, state[tc.appAfter])
			}
			if d := peek(client, "k", now); d != state[tc.clientAfter] {
				t.Errorf("client state after: %+v, want %+v", d, state[tc.clientAfter])
			}
		})
	}
}

// raceStore is a Store on which another request spends other's budget just
// before this one spends key's, as a concurrent request could between
// Allow's peek of the app limit and its spend.
type raceStore struct {
	Store
	other *Rule
}

func (s raceStore) AllowAt(key string, lim ratelimit.Limit, now time.Time, n int) ratelimit.Decision {
	if n > 0 {
		s.other.Store.AllowAt(AppKey, s.other.Lim, now, 1)
	}
	return s.Store.AllowAt(key, lim, now, n)
}

func TestAllowAppRefusesOnSpend(t *testing.T) {
	// The app had room when peeked and none when spent: the app refuses,
	// and a shadowed client refusal is still reported.
	for _, shadowClient := range []bool{false, true} {
		app := newTestRule(t, "a", reply.Rate, perSecond(10, 1))
		client := newTestRule(t, "c", reply.ClientRate, perSecond(10, 1))
		var s *shadows
		if shadowClient {
			client.Store.AllowAt("k", client.Lim, t0, 1)
			s = newShadows(client)
		} else {
			s = newShadows()
		}
		client.Store = raceStore{Store: client.Store, other: app}
		want := Outcome{Refused: app, ShadowedClient: shadowClient,
			Decision: ratelimit.Decision{RetryAfter: 100 * time.Millisecond, Reset: 100 * time.Millisecond}}
		if o := Allow(app, client, "k", 1, t0, s); o != want {
			t.Errorf("client shadowed %v: Allow = %+v, want %+v", shadowClient, o, want)
		}
	}
}

// The one race Allow documents: the app's last unit taken between its peek
// and its spend costs the client one unit, no more.
func TestAllowRaceSpendsOneClientUnit(t *testing.T) {
	app := newTestRule(t, "a", reply.Rate, perSecond(10, 1))
	client := newTestRule(t, "c", reply.ClientRate, perSecond(1, 2))
	client.Store = raceStore{Store: client.Store, other: app}
	if o := Allow(app, client, "k", 1, t0, noShadows{}); o.Refused != app {
		t.Fatalf("Allow = %+v, want refused by the app", o)
	}
	if d := peek(client, "k", t0); d.Remaining != 1 {
		t.Fatalf("client after the race: %+v, want one of its two units left", d)
	}
}

func TestAllowFactor(t *testing.T) {
	// Requests every millisecond for a second at 10/s burst 1: f scales the
	// rate, so exactly 10·f of them pass (one per 100ms/f, from t0).
	for _, tc := range []struct {
		f    float64
		want int
	}{{1, 10}, {2, 10}, {0.5, 5}, {0.25, 3}, {0.1, 1}} {
		for _, which := range []string{"app", "client"} {
			rule := newTestRule(t, "r", reply.Rate, perSecond(10, 1))
			app, client := rule, (*Rule)(nil)
			if which == "client" {
				app, client = nil, rule
			}
			passed := 0
			for ms := range 1000 {
				if o := Allow(app, client, "k", tc.f, t0.Add(time.Duration(ms)*time.Millisecond), noShadows{}); o.Refused == nil {
					passed++
				}
			}
			if passed != tc.want {
				t.Errorf("%s rule, f=%v: %d passed in a second, want %d", which, tc.f, passed, tc.want)
			}
		}
	}
	// f scales the burst too: 100/s burst 10 at f=0.5 is 50/s burst 5.
	app := newTestRule(t, "a", reply.Rate, perSecond(100, 10))
	client := newTestRule(t, "c", reply.ClientRate, perSecond(100, 10))
	for _, rules := range [][2]*Rule{{app, nil}, {nil, client}} {
		passed := 0
		for range 20 {
			if o := Allow(rules[0], rules[1], "k", 0.5, t0, noShadows{}); o.Refused == nil {
				passed++
			}
		}
		if passed != 5 {
			t.Errorf("burst 10 at f=0.5 (app %v): %d passed at once, want 5", rules[0] != nil, passed)
		}
	}
}

func TestAllowAllocatesNothing(t *testing.T) {
	app := newTestRule(t, "a", reply.Rate, perSecond(10, 1))
	client := newTestRule(t, "c", reply.ClientRate, perSecond(10, 1))
	key := "client-key"
	Allow(app, client, key, 1, t0, noShadows{}) // warm both keys

	now := t0
	bad := 0
	allowed := testing.AllocsPerRun(100, func() {
		now = now.Add(100 * time.Millisecond) // one interval: room again
		if o := Allow(app, client, key, 1, now, noShadows{}); o.Refused != nil {
			bad++
		}
	})
	if bad != 0 {
		t.Fatalf("%d of the allowed requests were refused", bad)
	}
	refusedApp := testing.AllocsPerRun(100, func() {
		if o := Allow(app, client, key, 1, now, noShadows{}); o.Refused != app {
			bad++
		}
	})
	refusedClient := testing.AllocsPerRun(100, func() {
		if o := Allow(nil, client, key, 1, now, noShadows{}); o.Refused != client {
			bad++
		}
	})
	if bad != 0 {
		t.Fatalf("%d of the refused requests were let through", bad)
	}
	if allowed != 0 || refusedApp != 0 || refusedClient != 0 {
		t.Fatalf("allocs per Allow: allowed %v, refused by the app %v, by the client %v; want 0",
			allowed, refusedApp, refusedClient)
	}
}

func TestRetryAfter(t *testing.T) {
	// Whole seconds rounded up, at least 1 (ratelimit.RetryAfterSeconds).
	for _, tc := range []struct {
		in, want time.Duration
	}{
		{0, time.Second},
		{time.Nanosecond, time.Second},
		{999 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{time.Second + time.Nanosecond, 2 * time.Second},
		{2500 * time.Millisecond, 3 * time.Second},
		{time.Hour, time.Hour},
	} {
		if got := RetryAfter(ratelimit.Decision{RetryAfter: tc.in}); got != tc.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A Decision that never allows (ratelimit.Never) once overflowed to a
// negative Retry-After, which the reply then dropped.
func TestRetryAfterNever(t *testing.T) {
	if got := RetryAfter(ratelimit.Decision{RetryAfter: ratelimit.Never}); got <= 0 {
		t.Fatalf("RetryAfter(Never) = %v, want > 0", got)
	}
}

func TestScaleCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		f    float64
		want int
	}{
		{10, 1, 10},
		{10, 3, 10},
		{1, 1, 1},
		{10, 0.5, 5},
		{7, 0.9, 6}, // 6.3: rounded down
		{100, 0.999, 99},
		{3, 0.5, 1},    // 1.5
		{10, 0.15, 1},  // 1.5
		{10, 0.01, 1},  // 0.1: never below 1
		{1, 0.0001, 1}, // never below 1
	} {
		if got := ScaleCount(tc.n, tc.f); got != tc.want {
			t.Errorf("ScaleCount(%d, %v) = %d, want %d", tc.n, tc.f, got, tc.want)
		}
	}
}

func TestScaleRate(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		in   ratelimit.Limit
		f    float64
		want ratelimit.Limit
	}{
		{ratelimit.Limit{Interval: 100 * ms, Burst: 10}, 1, ratelimit.Limit{Interval: 100 * ms, Burst: 10}},
		{ratelimit.Limit{Interval: 100 * ms, Burst: 10}, 2, ratelimit.Limit{Interval: 100 * ms, Burst: 10}},
		{ratelimit.Limit{Interval: 100 * ms, Burst: 10}, 0.5, ratelimit.Limit{Interval: 200 * ms, Burst: 5}},
		{ratelimit.Limit{Interval: 100 * ms, Burst: 5}, 0.1, ratelimit.Limit{Interval: time.Second, Burst: 1}},
		{ratelimit.Limit{Interval: time.Nanosecond, Burst: 1000}, 0.25, ratelimit.Limit{Interval: 4, Burst: 250}},
	} {
		if got := ScaleRate(tc.in, tc.f); got != tc.want {
			t.Errorf("ScaleRate(%+v, %v) = %+v, want %+v", tc.in, tc.f, got, tc.want)
		}
	}

	// The MaxDepth guard: 8 × 2^52ns is exactly MaxDepth, and at f=0.625 the
	// interval rounds up by a fraction of a nanosecond, so the scaled burst of
	// 5 would hold more than MaxDepth; the guard falls back to burst 1.
	in := ratelimit.Limit{Interval: 1 << 52, Burst: 8}
	got := ScaleRate(in, 0.625)
	if unguarded := (ratelimit.Limit{Interval: got.Interval, Burst: 5}); unguarded.Validate() == nil {
		t.Fatalf("test premise: %+v should exceed MaxDepth", unguarded)
	}
	if got.Interval <= in.Interval || got.Burst != 1 || got.Validate() != nil {
		t.Fatalf("ScaleRate(%+v, 0.625) = %+v (%v), want a longer interval, burst 1, valid",
			in, got, got.Validate())
	}
}

// One a day (a valid limits.rate) at f=0.001 (strict_fraction 1% × the
// default overload min_factor 10%) once scaled to an interval over
// MaxDepth: an invalid limit, which refused every request.
func TestScaleRateStaysValid(t *testing.T) {
	in := ratelimit.Limit{Interval: 24 * time.Hour, Burst: 1} // 1/24 per hour
	if err := in.Validate(); err != nil {
		t.Fatalf("test premise: %+v: %v", in, err)
	}
	if got := ScaleRate(in, 0.001); got.Validate() != nil {
		t.Fatalf("ScaleRate(%+v, 0.001) = %+v: %v", in, got, got.Validate())
	}
}

func TestNewRule(t *testing.T) {
	if r := NewRule("app", reply.Rate, ratelimit.Limit{}); r != nil {
		t.Fatalf("NewRule of the zero rate = %+v, want nil", r)
	}
	for _, tc := range []struct {
		name   string
		lim    ratelimit.Limit
		policy string
	}{
		{"app", ratelimit.Limit{Interval: 100 * time.Millisecond, Burst: 1}, `"app";q=10;w=1;levee-burst=1`},
		{"app", ratelimit.Limit{Interval: 1333334, Burst: 75}, `"app";q=750;w=1;levee-burst=75`},
		{"shop-client", ratelimit.Limit{Interval: time.Minute, Burst: 3}, `"shop-client";q=1;w=60;levee-burst=3`},
		{`a"b`, ratelimit.Limit{Interval: 500 * time.Millisecond, Burst: 4}, `"a\"b";q=2;w=1;levee-burst=4`},
	} {
		r := NewRule(tc.name, reply.ClientRate, tc.lim)
		if r == nil {
			t.Fatalf("NewRule(%q, %v) = nil", tc.name, tc.lim)
		}
		if r.Lim != tc.lim || r.Reason != reply.ClientRate || r.Store != nil {
			t.Errorf("NewRule(%q, %v) = %+v, want Lim %+v, reason %q, no store",
				tc.name, tc.lim, r, tc.lim, reply.ClientRate)
		}
		if got := r.Policy.Header(); got != tc.policy {
			t.Errorf("NewRule(%q, %v) policy %s, want %s", tc.name, tc.lim, got, tc.policy)
		}
	}
}

func TestNewRulePanicsOnInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  ratelimit.Limit
	}{
		{"no interval", ratelimit.Limit{Interval: -time.Second, Burst: 1}},
		{"beyond MaxDepth", ratelimit.Limit{Interval: time.Hour, Burst: 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if s, _ := p.(string); !strings.HasPrefix(s, "limits: a validated rate limit is invalid: ") {
					t.Fatalf("recovered %v, want the invariant panic", p)
				}
			}()
			NewRule("app", reply.Rate, tc.lim)
		})
	}
}

func TestRuleHTTPHeaders(t *testing.T) {
	rule := newTestRule(t, "app", reply.Rate, perSecond(10, 1))
	Allow(rule, nil, "", 1, t0, noShadows{})
	o := Allow(rule, nil, "", 1, t0.Add(50*time.Millisecond), noShadows{})
	if o.Refused != rule || o.Decision != refusal10 {
		t.Fatalf("Allow = %+v, want refused with %+v", o, refusal10)
	}
	burst := NewRule("app", reply.Rate, perSecond(100, 20))
	for _, tc := range []struct {
		rule              *Rule
		d                 ratelimit.Decision
		policy, rateLimit string
	}{
		{rule, o.Decision, `"app";q=10;w=1;levee-burst=1`, `"app";r=0;t=1`},
		// A refusal's t is its RetryAfter rounded up, not its Reset.
		{burst, ratelimit.Decision{RetryAfter: 2100 * time.Millisecond, Remaining: 0, Reset: 9 * time.Second},
			`"app";q=100;w=1;levee-burst=20`, `"app";r=0;t=3`},
		// An allowed decision's t is its Reset; a negative Remaining is 0.
		{burst, ratelimit.Decision{Allowed: true, Remaining: 7, Reset: 130 * time.Millisecond},
			`"app";q=100;w=1;levee-burst=20`, `"app";r=7;t=1`},
		{burst, ratelimit.Decision{RetryAfter: time.Second, Remaining: -2, Reset: 4 * time.Second},
			`"app";q=100;w=1;levee-burst=20`, `"app";r=0;t=1`},
	} {
		h := http.Header{"Ratelimit": {"stale", "values"}, "Other": {"kept"}}
		tc.rule.HTTPHeaders(h, tc.d)
		want := http.Header{"Ratelimit-Policy": {tc.policy}, "Ratelimit": {tc.rateLimit}, "Other": {"kept"}}
		if len(h) != len(want) || h.Get("Other") != "kept" ||
			len(h["Ratelimit-Policy"]) != 1 || h.Get("RateLimit-Policy") != tc.policy ||
			len(h["Ratelimit"]) != 1 || h.Get("RateLimit") != tc.rateLimit {
			t.Errorf("HTTPHeaders(%+v) = %v, want %v", tc.d, h, want)
		}
	}
	// Shared values: a refusal that reads as the last allocates nothing,
	// and one that reads otherwise gets its own.
	h1, h2 := http.Header{}, http.Header{}
	rule.HTTPHeaders(h1, o.Decision)
	if n := testing.AllocsPerRun(100, func() { rule.HTTPHeaders(h2, o.Decision) }); n != 0 {
		t.Errorf("a refusal as the last: %v allocations; want 0", n)
	}
	later := o.Decision
	later.RetryAfter += 5 * time.Second
	rule.HTTPHeaders(h2, later)
	if h1.Get("RateLimit") != `"app";r=0;t=1` || h2.Get("RateLimit") != `"app";r=0;t=6` ||
		h2.Get("RateLimit-Policy") != `"app";q=10;w=1;levee-burst=1` {
		t.Fatalf("headers: %v and %v", h1, h2)
	}
}
