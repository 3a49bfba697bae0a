package apps

import (
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/topk"
)

// The admin API's reads (docs/admin.md): the published views at the
// table's clock. They never take a lock that composing an app (or a cold
// app's load) holds. Instance is the table's part of GET /api/instance
// (cluster.go); the server adds the config's.

// Apps lists the apps serving, busiest first, at most limit (≤ 0: all),
// and how many there are (Views.Apps).
func (t *Table) Apps(limit int) ([]AppSummary, int) { return t.views.Apps(limit, t.o.Clock.Now()) }

// App is one app's detail, or false for an app not serving.
func (t *Table) App(name string) (AppDetail, bool) { return t.views.App(name, t.o.Clock.Now()) }

// Top is the heaviest clients of app by a dimension over a window, the
// names as in topk.Dimensions and topk.WindowNames. ok false: no such
// app; err: a bad parameter.
func (t *Table) Top(app, by, window string) (topk.Report, bool, error) {
	return t.views.Top(app, by, window, t.o.Clock.Now())
}

// AppStats is one app's state (GET /api/apps/{app}/backends), or false if
// no such app.
func (t *Table) AppStats(name string) (observe.AppStats, bool) {
	return t.views.Stats(name, t.o.Clock.Now())
}
