package limitsconf

import (
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/admit"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/ratelimit"
)

func TestClassifierClassNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		want admit.Class
	}{
		{config.ClassCritical, admit.Critical},
		{config.ClassSheddable, admit.Sheddable},
		{config.ClassDefault, admit.Default},
		{"", admit.Default},
	} {
		c := Classifier(config.Priority{
			Default: tc.name,
			Paths:   map[string]string{"/p": tc.name},
			Clients: map[string]string{"k": tc.name},
		})
		if got := c.Class("/other", "none"); got != tc.want {
			t.Errorf("default %q: %v, want %v", tc.name, got, tc.want)
		}
		if got := c.Class("/p", "none"); got != tc.want {
			t.Errorf("path class %q: %v, want %v", tc.name, got, tc.want)
		}
		if got := c.Class("/other", "k"); got != tc.want {
			t.Errorf("client class %q: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func perSecond(n float64) config.Rate { return config.Rate{Events: n, Per: time.Second} }

func TestGCRA(t *testing.T) {
	for _, tc := range []struct {
		r     config.Rate
		burst int
		want  ratelimit.Limit
	}{
		{config.Rate{}, 0, ratelimit.Limit{}},
		{config.Rate{}, 5, ratelimit.Limit{}},
		{perSecond(10), 0, ratelimit.Limit{Interval: 100 * time.Millisecond, Burst: 1}},
		{perSecond(10), 7, ratelimit.Limit{Interval: 100 * time.Millisecond, Burst: 7}},
		{perSecond(11), 0, ratelimit.Limit{Interval: 90909091, Burst: 2}}, // ceil(1.1)
		{perSecond(100), 0, ratelimit.Limit{Interval: 10 * time.Millisecond, Burst: 10}},
		{perSecond(750), 0, ratelimit.Limit{Interval: 1333334, Burst: 75}},
		{config.Rate{Events: 1, Per: time.Minute}, 0, ratelimit.Limit{Interval: time.Minute, Burst: 1}},
		{config.Rate{Events: 1.0 / 24, Per: time.Hour}, 0, ratelimit.Limit{Interval: 24 * time.Hour, Burst: 1}},
	} {
		got := GCRA(tc.r, tc.burst)
		if got != tc.want {
			t.Errorf("GCRA(%v, %d) = %+v, want %+v", tc.r, tc.burst, got, tc.want)
		}
		if tc.r != (config.Rate{}) && got.Burst != config.EffectiveBurst(tc.r, tc.burst) {
			t.Errorf("GCRA(%v, %d) burst %d, config.EffectiveBurst says %d",
				tc.r, tc.burst, got.Burst, config.EffectiveBurst(tc.r, tc.burst))
		}
	}
}

// Shapes give each per_path prefix its limits over the app's, longest
// prefix first, and apps one after another with the same shape limits
// share one checker.
func TestShapes(t *testing.T) {
	l, err := config.ParseLimits([]byte("{body: 100, header_count: 10, per_path: {/a: {body: 5}, /a/b: {header_count: 3}}}"))
	if err != nil {
		t.Fatal(err)
	}
	var c limits.ShapeCache
	sh := Shapes(&c, l)
	if len(sh.PerPath) != 2 || sh.PerPath[0].Prefix != "/a/b" || sh.PerPath[1].Prefix != "/a" {
		t.Fatalf("per_path %+v; want /a/b then /a", sh.PerPath)
	}
	if sh.App.Body != 100 || sh.PerPath[1].Body != 5 || sh.PerPath[0].Body != 100 {
		t.Errorf("bodies %d, /a %d, /a/b %d; want 100, 5, 100", sh.App.Body, sh.PerPath[1].Body, sh.PerPath[0].Body)
	}
	if got := sh.PerPath[0].Check.Limits().MaxHeaderCount; got != 3 {
		t.Errorf("/a/b header_count %d; want 3", got)
	}
	def, _ := config.ParseLimits(nil)
	if a, b := Shapes(&c, def), Shapes(&c, def); a.App.Check != b.App.Check {
		t.Error("two apps of the same shape limits got a checker each")
	}
}
