package health

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/balance"
)

// Defaults of [Ejection], applied by [Ejection.WithDefaults].
const (
	DefaultConsecutiveFailures = 5
	DefaultBaseEjection        = 30 * time.Second
	DefaultMaxEjection         = 5 * time.Minute
	DefaultMaxEjectedPercent   = 50
)

// Ejection configures passive outlier ejection. A zero field takes its
// default (see WithDefaults); a negative one is an error (see Validate).
type Ejection struct {
	// ConsecutiveFailures is how many Failed outcomes in a row eject a
	// backend. Default 5.
	ConsecutiveFailures int
	// BaseTime is the first ejection's length; the k-th ejection lasts
	// BaseTime·2^(k−1), capped at MaxTime. Default 30s.
	BaseTime time.Duration
	// MaxTime caps an ejection's length and is also the quiet period after
	// which the backoff starts again from BaseTime. Default 5m.
	MaxTime time.Duration
	// MaxEjectedPercent bounds the ejected backends of a Set to
	// ⌊Len·MaxEjectedPercent/100⌋, and never all of them. Default 50.
	MaxEjectedPercent int
}

// WithDefaults returns e with every zero field set to its default.
func (e Ejection) WithDefaults() Ejection {
	e.ConsecutiveFailures = cmp.Or(e.ConsecutiveFailures, DefaultConsecutiveFailures)
	e.BaseTime = cmp.Or(e.BaseTime, DefaultBaseEjection)
	e.MaxTime = cmp.Or(e.MaxTime, DefaultMaxEjection)
	e.MaxEjectedPercent = cmp.Or(e.MaxEjectedPercent, DefaultMaxEjectedPercent)
	return e
}

// Validate reports every field no ejector can honour. It never replaces a
// value; call it after WithDefaults.
func (e Ejection) Validate() error {
	var errs []error
	if e.ConsecutiveFailures < 1 {
		errs = append(errs, fmt.Errorf("health: ejection.consecutive_failures: must be ≥ 1 (got %d)", e.ConsecutiveFailures))
	}
	if e.BaseTime <= 0 {
		errs = append(errs, fmt.Errorf("health: ejection.base_time: must be > 0 (got %v)", e.BaseTime))
	}
	if e.MaxTime < e.BaseTime {
		errs = append(errs, fmt.Errorf("health: ejection.max_time: must be ≥ base_time %v (got %v)", e.BaseTime, e.MaxTime))
	}
	if e.MaxEjectedPercent < 0 || e.MaxEjectedPercent > 100 {
		errs = append(errs, fmt.Errorf("health: ejection.max_ejected_percent: must be in [0, 100] (got %d)", e.MaxEjectedPercent))
	}
	return errors.Join(errs...)
}

// Ejector is passive outlier ejection over the backends of one or more Sets.
// The forwarder calls Observe after every response; when a backend reaches
// ConsecutiveFailures Failed outcomes in a row (an OK resets the run, a
// Canceled does not count), Observe ejects it with
// [balance.Backend.EjectUntil] until now + BaseTime·2^k, capped at MaxTime,
// where k is the number of its earlier ejections (k returns to 0 once the
// backend has gone MaxTime past its last ejection's end). The ejection ends
// by time alone: balance treats an expired EjectUntil as healthy.
//
// An ejection is refused when it would leave more than MaxEjectedPercent of
// the Set ejected, or no other backend of the Set healthy; the backend is
// tried again after every further ConsecutiveFailures failures. Outcomes
// reported while a backend is ejected (requests still in flight) do not
// count, so an expired backend needs a fresh run of failures.
//
// State is kept per *balance.Backend, which NewSet carries across reloads,
// so it survives a reload. Safe for concurrent use.
type Ejector struct {
	cfg     Ejection
	log     *slog.Logger
	onEject func(id string, until time.Time)

	// states is read without a lock on every Observe; it is replaced, never
	// modified, under mu (copy on write: a backend is added once, on its
	// first failure).
	states atomic.Pointer[map[*balance.Backend]*ejectState]

	mu sync.Mutex // serialises ejections, so the bound holds
	// retired is the ejection totals of backends dropped by Retain, made
	// on the first (most apps never drop one); guarded by mu.
	retired map[string]uint64
}

type ejectState struct {
	id          string
	consecutive atomic.Int64 // Failed outcomes in a row, outside ejections
	until       atomic.Int64 // ns since the Unix epoch; ejected while now is before it
	total       atomic.Uint64

	// Guarded by Ejector.mu.
	level     int       // exponent of the next ejection's backoff
	lastUntil time.Time // end of the last ejection
	refused   bool      // the current run's refusal was logged
}

// EjectorOptions are the optional collaborators of an Ejector.
type EjectorOptions struct {
	// Logger receives one record per ejection and one per run of refused
	// ejections; nil discards.
	Logger *slog.Logger
	// OnEject, if set, is called on each ejection (for metrics), with the
	// Ejector's lock held: it must be quick and must not call the Ejector.
	OnEject func(id string, until time.Time)
}

// NewEjector returns an Ejector for cfg after WithDefaults, or the error of
// Validate.
func NewEjector(cfg Ejection, opts EjectorOptions) (*Ejector, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Ejector{cfg: cfg, log: opts.Logger, onEject: opts.OnEject}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.states.Store(&map[*balance.Backend]*ejectState{})
	return e, nil
}

// Config returns the configuration in use, defaults applied.
func (e *Ejector) Config() Ejection { return e.cfg }

// Observe records the outcome of a response from backend i of set at now.
// It is O(1) and does not allocate, except on a backend's first failure
// (state is created) and when the run reaches the threshold (O(Len) under
// a lock, once per ConsecutiveFailures failures).
func (e *Ejector) Observe(set *balance.Set, i int, o balance.Outcome, now time.Time) {
	if o != balance.OK && o != balance.Failed {
		return
	}
	b := set.Backend(i)
	st := (*e.states.Load())[b]
	if o == balance.OK {
		if st != nil && st.consecutive.Load() != 0 {
			st.consecutive.Store(0)
		}
		return
	}
	if st == nil {
		st = e.state(b)
	}
	if now.UnixNano() < st.until.Load() {
		return // a straggler of the current ejection
	}
	n := st.consecutive.Add(1)
	if k := int64(e.cfg.ConsecutiveFailures); n >= k && n%k == 0 {
		e.eject(set, b, st, n == k, now)
	}
}

// state returns b's state, creating it.
func (e *Ejector) state(b *balance.Backend) *ejectState {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.states.Load()
	if st := old[b]; st != nil {
		return st
	}
	st := &ejectState{id: b.ID()}
	m := maps.Clone(old)
	m[b] = st
	e.states.Store(&m)
	return st
}

// eject ejects b, backend of set, unless the bound forbids it. fresh says
// the run has just reached the threshold (not a retry after a refusal).
func (e *Ejector) eject(set *balance.Set, b *balance.Backend, st *ejectState, fresh bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ns := now.UnixNano()
	if ns < st.until.Load() || st.consecutive.Load() < int64(e.cfg.ConsecutiveFailures) {
		return // another goroutine ejected it meanwhile
	}
	if fresh {
		st.refused = false
	}
	m := *e.states.Load()
	ejected, others := 0, 0 // others: healthy, not ejected, not b
	for j := range set.Len() {
		o := set.Backend(j)
		switch s := m[o]; {
		case o == b:
		case s != nil && ns < s.until.Load():
			ejected++
		case o.Healthy(now):
			others++
		}
	}
	limit := min(set.Len()*e.cfg.MaxEjectedPercent/100, set.Len()-1)
	if ejected+1 > limit || others == 0 {
		if !st.refused {
			st.refused = true
			e.log.Warn("health: ejection refused", "backend", st.id,
				"failures", st.consecutive.Load(), "ejected", ejected, "max_ejected", limit, "healthy_others", others)
		}
		return
	}
	if !st.lastUntil.IsZero() && !now.Before(st.lastUntil.Add(e.cfg.MaxTime)) {
		st.level = 0 // quiet for MaxTime: start the backoff again
	}
	d := e.backoff(st.level)
	if d < e.cfg.MaxTime {
		st.level++
	}
	until := now.Add(d)
	failures := st.consecutive.Load()
	st.lastUntil, st.refused = until, false
	st.until.Store(until.UnixNano())
	st.consecutive.Store(0)
	total := st.total.Add(1)
	b.EjectUntil(until)
	e.log.Warn("health: backend ejected", "backend", st.id, "for", d, "until", until,
		"failures", failures, "ejections", total)
	if e.onEject != nil {
		e.onEject(st.id, until)
	}
}

// backoff returns BaseTime·2^level, capped at MaxTime.
func (e *Ejector) backoff(level int) time.Duration {
	d := e.cfg.BaseTime
	for range level {
		if d >= e.cfg.MaxTime/2 {
			return e.cfg.MaxTime
		}
		d *= 2
	}
	return min(d, e.cfg.MaxTime)
}

// Ejections returns the number of ejections so far per backend ID, for
// metrics; the counts only grow, also across reloads and Retain.
func (e *Ejector) Ejections() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	states := *e.states.Load()
	out := make(map[string]uint64, len(e.retired)+len(states))
	maps.Copy(out, e.retired)
	for _, st := range states {
		out[st.id] += st.total.Load()
	}
	return out
}

// Retain forgets the state of every backend not in set (keeping its
// ejection count); call it after a reload with the new Set so removed
// backends do not accumulate.
func (e *Ejector) Retain(set *balance.Set) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keep := make(map[*balance.Backend]bool, set.Len())
	for i := range set.Len() {
		keep[set.Backend(i)] = true
	}
	m := maps.Clone(*e.states.Load())
	for b, st := range m {
		if !keep[b] {
			if e.retired == nil {
				e.retired = map[string]uint64{}
			}
			e.retired[st.id] += st.total.Load()
			delete(m, b)
		}
	}
	e.states.Store(&m)
}
