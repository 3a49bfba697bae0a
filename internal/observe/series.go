package observe

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// An app's series are bound to their vectors on first use and recorded,
// so that forgetting an app deletes exactly its series: DeletePartialMatch
// would scan every series of every app, which made releasing one cold app
// cost O(apps cached).

// boundSeries records the label values of the series an app has bound.
type boundSeries struct {
	mu   sync.Mutex
	list []seriesKey
}

type seriesKey struct {
	vec   *prometheus.MetricVec
	label string // the second label value; "" for a vector of app alone
}

func (b *boundSeries) add(vec *prometheus.MetricVec, label string) {
	b.mu.Lock()
	b.list = append(b.list, seriesKey{vec, label})
	b.mu.Unlock()
}

// forget deletes every series recorded (one twice recorded by a race of
// two first uses is deleted once).
func (b *boundSeries) forget(app string) {
	b.mu.Lock()
	list := b.list
	b.list = nil
	b.mu.Unlock()
	for _, k := range list {
		if k.label == "" {
			k.vec.DeleteLabelValues(app)
		} else {
			k.vec.DeleteLabelValues(app, k.label)
		}
	}
}

// bindCounter binds the app's series of vec (labels app and label, or app
// alone when label is ""), recording it for Forget.
func (a *AppMetrics) bindCounter(vec *prometheus.CounterVec, label string) prometheus.Counter {
	a.series.add(vec.MetricVec, label)
	if label == "" {
		return vec.WithLabelValues(a.app)
	}
	return vec.WithLabelValues(a.app, label)
}

// Counter is one of an app's counter series, made (and exported) on its
// first Inc. Safe for concurrent use.
type Counter struct {
	a     *AppMetrics
	vec   *prometheus.CounterVec
	label string // the second label value; "" for a vector of app alone
	c     atomic.Pointer[counter]
}

type counter struct{ prometheus.Counter }

// Inc counts one; after the first it allocates nothing.
func (c *Counter) Inc() {
	p := c.c.Load()
	if p == nil {
		p = &counter{c.a.bindCounter(c.vec, c.label)}
		if !c.c.CompareAndSwap(nil, p) {
			p = c.c.Load()
		}
	}
	p.Inc()
}

// lazyObserver is one of an app's histogram series (labelled by app
// alone), bound on its first observation.
type lazyObserver struct{ p atomic.Pointer[observer] }

type observer struct{ prometheus.Observer }

func (o *lazyObserver) get(a *AppMetrics, vec *prometheus.HistogramVec) prometheus.Observer {
	if p := o.p.Load(); p != nil {
		return p.Observer
	}
	a.series.add(vec.MetricVec, "")
	o.p.CompareAndSwap(nil, &observer{vec.WithLabelValues(a.app)})
	return o.p.Load().Observer
}

// codeSlots is how many status codes an app's requests counters are kept
// for in codeCounters' slots, searched in turn; an app answers with a
// handful of codes, and the rest go to a map.
const codeSlots = 8

// codeCounters caches an app's levee_requests_total child per status code:
// 64 bytes where an array of every code took 4 KB per app.
type codeCounters struct {
	slots [codeSlots]atomic.Pointer[codeCounter]
	more  atomic.Pointer[sync.Map] // int → *codeCounter; made when the slots are full
}

type codeCounter struct {
	code int
	prometheus.Counter
}

// codeCounter returns the app's requests counter of code, binding it on
// first use. Slots fill in order and each is read again after a lost
// race, so a code holds one slot at most.
func (a *AppMetrics) codeCounter(code int) prometheus.Counter {
	c := &a.codes
	for i := range c.slots {
		p := c.slots[i].Load()
		if p == nil {
			p = &codeCounter{code, a.bindCounter(a.m.requests, strconv.Itoa(code))}
			if c.slots[i].CompareAndSwap(nil, p) {
				return p
			}
			p = c.slots[i].Load()
		}
		if p.code == code {
			return p
		}
	}
	more := made(&c.more)
	if p, ok := more.Load(code); ok {
		return p.(*codeCounter)
	}
	p, _ := more.LoadOrStore(code, &codeCounter{code, a.bindCounter(a.m.requests, strconv.Itoa(code))})
	return p.(*codeCounter)
}
