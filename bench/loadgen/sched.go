package main

import (
	"math"
	"sync/atomic"
	"time"
)

// Schedule is an open-loop, constant-rate arrival schedule: request i is
// intended to be sent at Start + i/rate, for i in [0, Total). Workers claim
// requests in order with Claim; the schedule itself never waits for anyone, so
// a slow target cannot slow the arrivals down (no coordinated omission).
type Schedule struct {
	Start time.Time
	Rate  float64 // requests per second, > 0
	Total int64
	next  atomic.Int64
}

// NewSchedule returns the schedule of rate requests per second for dur.
func NewSchedule(start time.Time, rate float64, dur time.Duration) *Schedule {
	return &Schedule{Start: start, Rate: rate, Total: TotalFor(rate, dur)}
}

// TotalFor is the number of requests a constant rate sends in dur:
// floor(rate * dur), at least 1 for a positive rate and duration.
func TotalFor(rate float64, dur time.Duration) int64 {
	if rate <= 0 || dur <= 0 {
		return 0
	}
	n := int64(math.Floor(rate*dur.Seconds() + 1e-9))
	if n < 1 {
		n = 1
	}
	return n
}

// Offset is the intended send time of request i relative to Start.
func (s *Schedule) Offset(i int64) time.Duration {
	return time.Duration(math.Round(float64(i) * 1e9 / s.Rate))
}

// Intended is the intended send time of request i.
func (s *Schedule) Intended(i int64) time.Time { return s.Start.Add(s.Offset(i)) }

// Claim hands out the next request of the schedule: its index and intended
// send time; ok is false once all Total requests have been handed out.
func (s *Schedule) Claim() (i int64, at time.Time, ok bool) {
	i = s.next.Add(1) - 1
	if i >= s.Total {
		return i, time.Time{}, false
	}
	return i, s.Intended(i), true
}

// Action is what a worker does with a claimed request.
type Action int

const (
	// Send now (after waiting until the intended time, if that is later).
	Send Action = iota
	// Drop: the request's whole timeout passed before any connection was
	// free to send it. It counts as a timeout ("unsent"), never as sent.
	Drop
)

// Decide is the pure scheduling rule for one claimed request: wait is how
// long to sleep before sending (0 if the intended time has passed); a request
// whose deadline (intended + timeout) has already passed is dropped.
func Decide(intended, now time.Time, timeout time.Duration) (Action, time.Duration) {
	if now.Before(intended) {
		return Send, intended.Sub(now)
	}
	if !now.Before(intended.Add(timeout)) {
		return Drop, 0
	}
	return Send, 0
}

// Clock is the time source of the workers; tests use a fake one.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// Doer sends one request and reads its response, giving up at deadline.
// status is the HTTP status (0 with a non-nil err); timedOut tells a deadline
// from other failures.
type Doer interface {
	Do(deadline time.Time) (status int, timedOut bool, err error)
}

// Stats collects the outcome of every scheduled request. All fields are safe
// for concurrent use; memory is fixed.
type Stats struct {
	Sent      atomic.Uint64 // requests written (or attempted) to a connection
	Unsent    atomic.Uint64 // dropped: no connection free before the deadline
	Late      atomic.Uint64 // claimed after their intended time: every connection was busy
	OK        atomic.Uint64 // 2xx
	Rejected  atomic.Uint64 // any other status
	Timeouts  atomic.Uint64 // sent, no complete response by the deadline
	Errors    atomic.Uint64 // sent, failed otherwise (reset, refused, bad response)
	ByStatus  [600]atomic.Uint64
	ErrKinds  [errKindCount]atomic.Uint64
	OKLat     Histogram // latency of 2xx, from the intended send time
	RejLat    Histogram // latency of non-2xx, from the intended send time
	SchedLag  Histogram // send time - intended time, for requests claimed ahead of time (generator accuracy)
	Completed atomic.Uint64
}

// Run is one worker: it claims requests from s until none are left, waits
// for each one's intended time, and sends it with d, recording the latency
// from the intended send time — so time spent waiting for a free connection
// or for the generator itself counts against the target, as a real client
// would see it.
func Run(s *Schedule, clk Clock, d Doer, timeout time.Duration, st *Stats) {
	for {
		_, at, ok := s.Claim()
		if !ok {
			return
		}
		now := clk.Now()
		act, wait := Decide(at, now, timeout)
		ahead := wait > 0
		if !ahead {
			st.Late.Add(1)
		}
		if act == Drop {
			st.Unsent.Add(1)
			continue
		}
		if ahead {
			clk.Sleep(wait)
			now = clk.Now()
			if lag := now.Sub(at); lag > 0 {
				st.SchedLag.Record(lag)
			} else {
				st.SchedLag.Record(0)
			}
		}
		st.Sent.Add(1)
		status, timedOut, err := d.Do(at.Add(timeout))
		lat := clk.Now().Sub(at)
		switch {
		case err != nil && timedOut:
			st.Timeouts.Add(1)
		case err != nil:
			st.Errors.Add(1)
			st.ErrKinds[classify(err)].Add(1)
		case lat >= timeout:
			// a response that arrived just past the deadline is a timeout too
			st.Timeouts.Add(1)
		default:
			st.Completed.Add(1)
			if status > 0 && status < len(st.ByStatus) {
				st.ByStatus[status].Add(1)
			}
			if status >= 200 && status < 300 {
				st.OK.Add(1)
				st.OKLat.Record(lat)
			} else {
				st.Rejected.Add(1)
				st.RejLat.Record(lat)
			}
		}
	}
}
