// Package drill replays the incidents behind levee against any HTTP edge and
// grades it: an open-loop load generator (this file and gen.go), the drills
// built on it, and the report card they produce.
package drill

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Step is one stretch of a stepped arrival rate.
type Step struct {
	Rate float64       // requests per second, > 0
	For  time.Duration // > 0
}

// Schedule is an open-loop arrival schedule: request i is due at a fixed
// offset from the start, whatever happened to earlier requests, so a slow
// target cannot slow the arrivals down (no coordinated omission). Within a
// step the offsets are first + k/rate, computed from the step's start rather
// than summed, so they never drift.
type Schedule struct {
	steps []Step
	first []int64         // index of each step's first request
	start []time.Duration // offset of each step's start
	total int64
	span  time.Duration
}

// NewSchedule returns the schedule of steps, cut off after max requests
// (max <= 0: no cut-off beyond the steps).
func NewSchedule(steps []Step, max int64) (*Schedule, error) {
	if len(steps) == 0 {
		return nil, fmt.Errorf("drill: a schedule needs at least one step")
	}
	s := &Schedule{steps: steps}
	var at time.Duration
	for i, st := range steps {
		if !(st.Rate > 0) || math.IsInf(st.Rate, 0) || st.For <= 0 {
			return nil, fmt.Errorf("drill: step %d: rate %v for %v; want a positive rate and duration", i, st.Rate, st.For)
		}
		s.first = append(s.first, s.total)
		s.start = append(s.start, at)
		s.total += int64(math.Floor(st.Rate*st.For.Seconds() + 1e-9))
		at += st.For
	}
	s.span = at
	if max > 0 && s.total > max {
		s.total = max
	}
	return s, nil
}

// Constant is the one-step schedule of rate requests per second for d.
func Constant(rate float64, d time.Duration, max int64) (*Schedule, error) {
	return NewSchedule([]Step{{Rate: rate, For: d}}, max)
}

// Total is the number of requests the schedule sends.
func (s *Schedule) Total() int64 { return s.total }

// Span is the length of the schedule (the sum of its steps).
func (s *Schedule) Span() time.Duration { return s.span }

// Offset is the intended send time of request i relative to the start.
func (s *Schedule) Offset(i int64) time.Duration {
	k := len(s.steps) - 1
	for k > 0 && i < s.first[k] {
		k--
	}
	n := i - s.first[k]
	return s.start[k] + time.Duration(math.Round(float64(n)*1e9/s.steps[k].Rate))
}

// ParseRate reads "750", "750/s", "1.5k/s", "600/m" as requests per second.
func ParseRate(s string) (float64, error) {
	in := s
	s = strings.TrimSpace(s)
	per := 1.0
	if i := strings.IndexByte(s, '/'); i >= 0 {
		switch s[i+1:] {
		case "s":
		case "m":
			per = 60
		default:
			return 0, fmt.Errorf("rate %q: unknown unit %q (want /s or /m)", in, s[i:])
		}
		s = s[:i]
	}
	mult := 1.0
	if strings.HasSuffix(s, "k") {
		mult, s = 1000, strings.TrimSuffix(s, "k")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("rate %q: want a positive number such as 750/s", in)
	}
	r := v * mult / per
	if r > 1_000_000 {
		return 0, fmt.Errorf("rate %q: above 1,000,000/s", in)
	}
	return r, nil
}

// ParseSteps reads a stepped rate: "100/s:2s,500/s:3s". A rate without a
// duration ("750/s") lasts for def.
func ParseSteps(s string, def time.Duration) ([]Step, error) {
	var out []Step
	for _, part := range strings.Split(s, ",") {
		r, d, found := strings.Cut(strings.TrimSpace(part), ":")
		rate, err := ParseRate(r)
		if err != nil {
			return nil, err
		}
		dur := def
		if found {
			if dur, err = time.ParseDuration(d); err != nil || dur <= 0 {
				return nil, fmt.Errorf("step %q: want RATE:DURATION such as 500/s:3s", part)
			}
		}
		out = append(out, Step{Rate: rate, For: dur})
	}
	return out, nil
}
