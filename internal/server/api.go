package server

import (
	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/overload"
	"github.com/leveeproxy/levee/internal/topk"
)

// The live view of the admin API (docs/admin.md) is apps.Views: it never
// takes Server.mu, which a cold app's load needs. composeApp publishes
// each app's view whole.

// publish makes rt's app visible to the API as composed; the caller holds
// s.mu.
func (s *Server) publish(a *app, ac *config.App, rt *route) {
	s.views.Publish(&apps.View{Name: a.name, Hosts: ac.Hosts, Stored: a.stored != nil, Limiter: a.limiter,
		Conf: a.conf, Limits: &ac.Limits, Metrics: a.metrics, Top: a.top.v, Guard: rt.guard, Window: a.window,
		Set: a.backends, Alert: a.alert, Adaptive: a.adaptive != nil, Conns: a.conns})
}

// publishScale publishes the scale; the caller holds s.mu.
func (s *Server) publishScale() { s.views.PublishScale(s.scale.View()) }

// noteSample keeps the overload monitor's last reading for the API; owned
// by the overload loop.
func (s *Server) noteSample(sample overload.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views.NoteSample(s.scale.View(), sample)
}

// Apps lists the apps serving, busiest first, at most limit (≤ 0: all),
// and how many there are (apps.Views.Apps).
func (s *Server) Apps(limit int) ([]apps.AppSummary, int) { return s.views.Apps(limit, s.clk.Now()) }

// App is one app's detail, or false for an app not serving.
func (s *Server) App(name string) (apps.AppDetail, bool) { return s.views.App(name, s.clk.Now()) }

// Top is the heaviest clients of app by a dimension over a window, the
// names as in topk.Dimensions and topk.WindowNames. ok false: no such
// app; err: a bad parameter.
func (s *Server) Top(app, by, window string) (topk.Report, bool, error) {
	return s.views.Top(app, by, window, s.clk.Now())
}

// EachApp reports every app's state to the metrics collector. Like the
// admin API it reads the published views, never Server.mu.
func (s *Server) EachApp(fn func(observe.AppStats)) { s.views.EachStats(s.clk.Now(), fn) }

// AppStats returns one app's state (for the admin API), or false if no such app.
func (s *Server) AppStats(name string) (observe.AppStats, bool) {
	return s.views.Stats(name, s.clk.Now())
}

// Instance reports this instance's role, scale and cluster state.
func (s *Server) Instance() apps.Instance {
	in := s.views.Instance()
	snap := s.current.Load()
	if c := s.cluster; c != nil {
		in.Cluster = &apps.ClusterState{Redis: snap.cfg.Cluster.Redis.Addrs, Degraded: c.Degraded(), Reachable: !c.Degraded(),
			LiveInstances: c.Live()}
	}
	in.ConfigChecksum, in.ConfigLoaded = snap.cfg.Checksum, snap.loaded
	return in
}
