package server

import "time"

// sweepRates drops idle client state every interval until done; owned by Serve.
func (s *Server) sweepRates(done <-chan struct{}, every time.Duration) {
	s.every(done, every, s.apps.Sweep)
}

// every calls fn every interval until done, on the server's clock: the
// one loop of the server's background work.
func (s *Server) every(done <-chan struct{}, interval time.Duration, fn func()) {
	s.everyOf(done, func() time.Duration { return interval }, fn)
}

// everyOf is every with the interval read afresh before each wait (a
// setting a reload may change).
func (s *Server) everyOf(done <-chan struct{}, interval func() time.Duration, fn func()) {
	t := s.clk.NewTimer(interval())
	defer func() { t.Stop() }() // the timer current at exit
	for {
		select {
		case <-done:
			return
		case <-t.C():
			fn()
			t = s.clk.NewTimer(interval())
		}
	}
}
