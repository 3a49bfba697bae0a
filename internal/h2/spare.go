package h2

import (
	"net/http"
	"sync"
	"time"
)

// A connection keeps the goroutine of a handler that has returned, for a
// while, to run the next stream's handler on. A new goroutine per stream
// starts on a small stack that a handler going deep (levee's forward path
// through fasthttp's client) grew and copied on every request, each copy
// walking every frame: 5.5% of levee's CPU at 64 connections, plus the
// goroutine's creation. A kept goroutine's stack is already grown.
//
// The goroutines kept are few (maxSpares) and short-lived (spareIdle), so
// that idle connections hold none; each is counted in the connection's
// handler group, so finish returns only once they have gone.
const (
	maxSpares = 4
	spareIdle = time.Second
)

type spareJob struct {
	st *stream
	h  http.Handler
}

type spares struct {
	mu   sync.Mutex
	n    int           // goroutines parked, not yet handed a job
	jobs chan spareJob // made with the first parked goroutine; cap maxSpares
}

// spawn runs h for st on a parked goroutine, or on a new one. The caller
// has counted the handler in hwg.
func (c *conn) spawn(st *stream, h http.Handler) {
	sp := &c.spares
	sp.mu.Lock()
	if sp.n > 0 {
		sp.n--
		sp.mu.Unlock()
		sp.jobs <- spareJob{st, h} // never blocks: a parked goroutine will take it
		return
	}
	sp.mu.Unlock()
	c.hwg.Add(1) // the goroutine's own life, beyond its handlers
	go c.work(st, h)
}

// work runs handlers until it has waited spareIdle for one, the
// connection has ended, or enough goroutines are parked already.
func (c *conn) work(st *stream, h http.Handler) {
	defer c.hwg.Done()
	var idle *time.Timer
	for {
		st.run(h)
		st, h = nil, nil
		if !c.park() {
			return
		}
		if idle == nil {
			idle = time.NewTimer(spareIdle)
		} else {
			idle.Reset(spareIdle)
		}
		var j spareJob
		select {
		case j = <-c.spares.jobs:
		case <-idle.C:
		case <-c.ctx.Done():
		}
		if j.st == nil {
			// Gone, unless a job was handed to this goroutine's count
			// meanwhile: then it is in the channel, for it to take.
			if c.unpark() {
				idle.Stop()
				return
			}
			j = <-c.spares.jobs
		}
		st, h = j.st, j.h
	}
}

// park counts the calling goroutine as waiting for a job; false if it
// should end instead.
func (c *conn) park() bool {
	sp := &c.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.n >= maxSpares || c.ctx.Err() != nil {
		return false
	}
	if sp.jobs == nil {
		sp.jobs = make(chan spareJob, maxSpares)
	}
	sp.n++
	return true
}

// unpark takes the calling goroutine's count back, false if a job was
// handed to it meanwhile (the count is the jobs not yet taken's).
func (c *conn) unpark() bool {
	sp := &c.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.n == 0 {
		return false
	}
	sp.n--
	return true
}
