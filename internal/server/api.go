package server

import (
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/topk"
)

// The live view of the admin API (docs/admin.md) is the apps.Table's
// Views: it never takes a lock that composing an app (or a cold app's
// load) holds.

// Apps lists the apps serving, busiest first, at most limit (≤ 0: all),
// and how many there are (apps.Views.Apps).
func (s *Server) Apps(limit int) ([]apps.AppSummary, int) {
	return s.apps.Views().Apps(limit, s.clk.Now())
}

// App is one app's detail, or false for an app not serving.
func (s *Server) App(name string) (apps.AppDetail, bool) {
	return s.apps.Views().App(name, s.clk.Now())
}

// Top is the heaviest clients of app by a dimension over a window, the
// names as in topk.Dimensions and topk.WindowNames. ok false: no such
// app; err: a bad parameter.
func (s *Server) Top(app, by, window string) (topk.Report, bool, error) {
	return s.apps.Views().Top(app, by, window, s.clk.Now())
}

// EachApp reports every app's state to the metrics collector. Like the
// admin API it reads the published views, never Server.mu.
func (s *Server) EachApp(fn func(observe.AppStats)) { s.apps.Views().EachStats(s.clk.Now(), fn) }

// AppStats returns one app's state (for the admin API), or false if no such app.
func (s *Server) AppStats(name string) (observe.AppStats, bool) {
	return s.apps.Views().Stats(name, s.clk.Now())
}

// Instance reports this instance's role, scale and cluster state
// (apps.Table.Instance), and the config in force.
func (s *Server) Instance() apps.Instance {
	in, snap := s.apps.Instance(), s.current.Load()
	in.ConfigChecksum, in.ConfigLoaded = snap.cfg.Checksum, snap.loaded
	return in
}
