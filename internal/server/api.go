package server

import (
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/observe"
)

// The live view of the admin API (docs/admin.md) is the apps.Table's
// (apps.Table.Apps, App, Top, AppStats): it never takes a lock that
// composing an app (or a cold app's load) holds. The server adds what is
// its own: the config in force.

// EachApp reports every app's state to the metrics collector. Like the
// admin API it reads the published views, never Server.mu.
func (s *Server) EachApp(fn func(observe.AppStats)) { s.apps.Views().EachStats(s.clk.Now(), fn) }

// Instance reports this instance's role, scale and cluster state
// (apps.Table.Instance), and the config in force.
func (s *Server) Instance() apps.Instance {
	in, snap := s.apps.Instance(), s.current.Load()
	in.ConfigChecksum, in.ConfigLoaded = snap.cfg.Checksum, snap.loaded
	return in
}
