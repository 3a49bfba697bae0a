package server

import "time"

// The limit scale (strict × overload) is the apps.Table's. The server
// owns when it changes: SetUnexpected recomposes every route, the
// overload loop rescales every app's limiter in place.

// SetUnexpected says whether this instance is unexpected (another levee
// holds the instance lock): its limits are then scaled to
// instance.strict_fraction. Switching recomposes every app's route, as a
// reload of the same config would, and is reported in
// levee_instance_role.
func (s *Server) SetUnexpected(unexpected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apps.SetUnexpected(unexpected)
	s.applyLocked(s.cfg) // publishes the scale
}

// watchOverload samples the host every overload.interval while
// overload.enabled, and puts the monitor's factor in force, until done;
// owned by Serve. Turning the monitor off on reload puts the limits back.
func (s *Server) watchOverload(done <-chan struct{}) {
	s.everyOf(done, func() time.Duration { return s.Config().Overload.Interval.D() }, s.overloadTick)
}

// overloadTick is one turn of watchOverload.
func (s *Server) overloadTick() { s.apps.OverloadTick(s.Config().Overload) }
