package server

// The limit scale (strict × overload) is the apps.Table's: its overload
// loop (apps.Table.Run) rescales every app's limiter in place. The
// server owns when the instance's role changes it: SetUnexpected
// recomposes every route.

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
