package limits

import (
	"strings"
	"testing"

	"github.com/leveeproxy/levee/internal/admit"
)

// priority is limits.priority as NewClassifier takes it.
type priority struct {
	Default        admit.Class
	Paths, Clients map[string]admit.Class
}

func newClassifier(p priority) Classifier { return NewClassifier(p.Default, p.Paths, p.Clients) }

// chainClass is the class of the chain prefix of depth d (/s1/s2/…/sd): the
// three classes in turn, so each prefix differs from the next shorter one.
func chainClass(d int) (admit.Class, admit.Class) {
	switch d % 3 {
	case 0:
		return admit.Critical, admit.Critical
	case 1:
		return admit.Sheddable, admit.Sheddable
	}
	return admit.Default, admit.Default
}

func TestClassifierLongestPrefixWins(t *testing.T) {
	// A chain of 40 nested prefixes, from a map of random order each time:
	// every path gets the class of the deepest prefix it is under.
	const depth = 40
	paths := map[string]admit.Class{}
	prefix := ""
	for d := 1; d <= depth; d++ {
		prefix += "/s" + string(rune('a'+d%26)) + string(rune('a'+d/26))
		paths[prefix], _ = chainClass(d)
	}
	for range 20 {
		c := newClassifier(priority{Default: admit.Default, Paths: paths})
		path := ""
		for d := 1; d <= depth; d++ {
			path += "/s" + string(rune('a'+d%26)) + string(rune('a'+d/26))
			_, want := chainClass(d)
			if got := c.Class(path, ""); got != want {
				t.Fatalf("Class(%q) = %v, want %v (depth %d)", path, got, want, d)
			}
			if got := c.Class(path+"/leaf", ""); got != want {
				t.Fatalf("Class(%q) = %v, want %v (depth %d)", path+"/leaf", got, want, d)
			}
		}
	}
}

func TestClassifierPathSegments(t *testing.T) {
	// urlpath.HasPrefix: the path is the prefix, or goes on at a '/'
	// after it, or the prefix itself ends in '/'.
	c := newClassifier(priority{
		Default: admit.Default,
		Paths: map[string]admit.Class{
			"/api":       admit.Critical,
			"/api/v1":    admit.Sheddable,
			"/static/":   admit.Sheddable,
			"/health":    admit.Critical,
			"/health/db": admit.Default,
		},
	})
	for _, tc := range []struct {
		path string
		want admit.Class
	}{
		{"/api", admit.Critical},
		{"/api/", admit.Critical},
		{"/api/x", admit.Critical},
		{"/apix", admit.Default},
		{"/ap", admit.Default},
		{"/api/v1", admit.Sheddable},
		{"/api/v1/users", admit.Sheddable},
		{"/api/v10", admit.Critical}, // not under /api/v1, still under /api
		{"/api/v1x/y", admit.Critical},
		{"/static/", admit.Sheddable},
		{"/static/a.css", admit.Sheddable},
		{"/static", admit.Default}, // the prefix ends in '/'
		{"/staticx", admit.Default},
		{"/health/db", admit.Default}, // the longer prefix's own class
		{"/health/dbx", admit.Critical},
		{"/API", admit.Default}, // case matters
		{"", admit.Default},
		{"/", admit.Default},
	} {
		if got := c.Class(tc.path, ""); got != tc.want {
			t.Errorf("Class(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestClassifierRootPrefix(t *testing.T) {
	// "/" is under every path prefix, the shortest, so it loses to any other.
	c := newClassifier(priority{
		Default: admit.Critical,
		Paths:   map[string]admit.Class{"/": admit.Sheddable, "/admin": admit.Critical},
	})
	for path, want := range map[string]admit.Class{
		"/":        admit.Sheddable,
		"/x":       admit.Sheddable,
		"/admin":   admit.Critical,
		"/admin/x": admit.Critical,
		"/adminx":  admit.Sheddable,
		"x":        admit.Critical, // not a path under "/": the default
	} {
		if got := c.Class(path, ""); got != want {
			t.Errorf("Class(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestClassifierPathBeatsClient(t *testing.T) {
	c := newClassifier(priority{
		Default: admit.Default,
		Paths:   map[string]admit.Class{"/batch": admit.Sheddable},
		Clients: map[string]admit.Class{"vip": admit.Critical, "bot": admit.Sheddable},
	})
	for _, tc := range []struct {
		path, client string
		want         admit.Class
	}{
		{"/batch/run", "vip", admit.Sheddable}, // the path rule beats the client's
		{"/batch", "", admit.Sheddable},
		{"/checkout", "vip", admit.Critical}, // no path matches: the client's
		{"/checkout", "bot", admit.Sheddable},
		{"/checkout", "someone", admit.Default}, // neither: the default
		{"/checkout", "", admit.Default},
		{"/checkout", "VIP", admit.Default}, // client keys are exact
	} {
		if got := c.Class(tc.path, tc.client); got != tc.want {
			t.Errorf("Class(%q, %q) = %v, want %v", tc.path, tc.client, got, tc.want)
		}
	}
}

func TestClassifierZero(t *testing.T) {
	// The zero Priority (and the zero Classifier) puts everything in Default.
	for _, c := range []Classifier{newClassifier(priority{}), {}} {
		if got := c.Class("/x", "k"); got != admit.Default {
			t.Errorf("Class = %v, want Default", got)
		}
		if c.NeedsClient() {
			t.Errorf("NeedsClient with no client rules")
		}
	}
}

func TestClassifierNeedsClient(t *testing.T) {
	for _, tc := range []struct {
		p    priority
		want bool
	}{
		{priority{Default: admit.Critical}, false},
		{priority{Paths: map[string]admit.Class{"/a": admit.Critical}}, false},
		{priority{Clients: map[string]admit.Class{}}, false},
		{priority{Clients: map[string]admit.Class{"k": admit.Default}}, true},
		{priority{Paths: map[string]admit.Class{"/a": admit.Critical},
			Clients: map[string]admit.Class{"k": admit.Sheddable, "j": admit.Critical}}, true},
	} {
		c := newClassifier(tc.p)
		if got := c.NeedsClient(); got != tc.want {
			t.Errorf("NeedsClient(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestClassifierIsACopy(t *testing.T) {
	// The classifier keeps no reference to the config's maps.
	p := priority{
		Paths:   map[string]admit.Class{"/a": admit.Critical},
		Clients: map[string]admit.Class{"k": admit.Critical},
	}
	c := newClassifier(p)
	p.Paths["/a"], p.Clients["k"] = admit.Sheddable, admit.Sheddable
	p.Paths["/b"] = admit.Sheddable
	if c.Class("/a", "") != admit.Critical || c.Class("/x", "k") != admit.Critical || c.Class("/b", "") != admit.Default {
		t.Fatal("the classifier follows edits to the config's maps")
	}
}

func TestClassifierAllocatesNothing(t *testing.T) {
	c := newClassifier(priority{
		Paths:   map[string]admit.Class{"/api": admit.Critical, "/api/v1": admit.Sheddable},
		Clients: map[string]admit.Class{"vip": admit.Critical},
	})
	path := "/api/v1/" + strings.Repeat("x", 10)
	if n := testing.AllocsPerRun(100, func() { c.Class(path, "vip"); c.Class("/none", "vip") }); n != 0 {
		t.Fatalf("Class allocates %v", n)
	}
}
