package admission

import (
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// Limits are the limits of one handler: levee's `limits:` section of an
// app, as Go values. A zero field is levee's default for it, so Limits{}
// are levee's default limits and
//
//	admission.Limits{Concurrency: 64, Rate: admission.PerSecond(500)}
//
// changes two of them. A field whose default is a limit and that can also
// be "none" (no queue, no body) takes a negative value for none, as its
// comment says. NewGate validates Limits by levee's rules, with errors that
// name the field as the config writes it (limits.queue.max_len: ...).
// ParseLimits is the other way in: the same section written in YAML.
//
// A Limits value may be used for any number of gates, each with its own
// state; a gate keeps a copy, so changing the value (or its maps) after
// NewGate changes nothing in force.
type Limits struct {
	// Concurrency is the most requests in the handler at once (1..1048576;
	// 0: 256). A request over it waits in Queue, or is refused (503).
	Concurrency int
	// Adaptive, when set, makes the concurrency limit follow the handler's
	// latency and its 5xx answers (gradient) instead of Concurrency.
	Adaptive *Adaptive
	// Queue bounds the wait for a concurrency slot.
	Queue Queue
	// Rate is the handler's request rate (GCRA: exact over any window);
	// the zero RequestRate is off. Burst is how many may come at once above it
	// (0: Rate per second ÷ 10, at least 1).
	Rate  RequestRate
	Burst int
	// Client limits each client, by its key, within the handler.
	Client Client
	// FairShare refuses, at the concurrency limit, a client holding more
	// than its share of the slots (limit ÷ clients with work) before any
	// client within its share (503 client-share).
	FairShare bool
	// Priority sorts requests into critical, default and sheddable.
	Priority Priority
	// Body is the largest request body, in bytes (0: 10 MB; negative: no
	// body at all). A larger declared one is refused at once, an undeclared
	// one as the handler reads past it (413).
	Body int64
	// HeaderBytes and HeaderCount bound the request's header fields, Host
	// included (431); URLLength the request target, path and query, in
	// bytes, and QueryValues its query parameters (414). 0: levee's
	// defaults, 64 KiB, 100, 8 KiB and 256.
	HeaderBytes, HeaderCount, URLLength, QueryValues int
	// Batch counts the items of a JSON array field as the body streams
	// (off when Batch.JSONField is "").
	Batch Batch
	// PerPath overrides the request-shape limits (Body, the header and URL
	// limits, Batch) under path prefixes, on segment boundaries; the
	// longest prefix wins.
	PerPath map[string]PathLimits
	// Shadow lists refusal reasons that are counted (Stats.Shadowed)
	// instead of refused: one of URLLength, QueryValues, HeaderCount,
	// HeaderBytes, Rate, ClientRate, Body, BatchItems, BatchJSON and
	// BatchShape. The request goes on, marked Levee-Shadow.
	Shadow []Reason
}

// Adaptive is a concurrency limit that follows the handler's latency
// (gradient: internal/admit/limit), between Min and Max (0: 8 and 1024).
type Adaptive struct{ Min, Max int }

// Queue bounds the wait for a concurrency slot. A zero field is levee's
// default: MaxLen 1024, MaxWait 50ms, Target 5ms, Interval 100ms.
type Queue struct {
	// MaxLen is the most requests waiting at once (negative: no queue).
	MaxLen int
	// MaxWait is the longest a request waits (negative: no waiting).
	MaxWait time.Duration
	// Target is the queueing delay the queue should stay under: when even
	// the shortest wait stayed above it for Interval, the queue sheds
	// (CoDel-style: sheddable first, waits cut to 2×Target, LIFO).
	Target, Interval time.Duration
}

// RequestRate is Events per Per; the zero RequestRate is off.
type RequestRate struct {
	Events float64
	Per    time.Duration
}

// PerSecond is n events a second.
func PerSecond(n float64) RequestRate { return RequestRate{Events: n, Per: time.Second} }

// Client limits each client of a handler, by its key.
type Client struct {
	// Key says who the client is: "ip" (the peer's address; the default,
	// for "") or "header:NAME". Requests without the header share one
	// bucket, so leaving it out gains a client nothing.
	Key string
	// Rate is each client's request rate (zero: off), and Burst its burst
	// (0: Rate per second ÷ 10, at least 1).
	Rate  RequestRate
	Burst int
	// MaxKeys bounds the clients tracked at once (0: 100,000); past it,
	// new clients share one bucket.
	MaxKeys int
	// TopK is how many of the heaviest clients Gate.Top reports (0: 16;
	// negative: none kept).
	TopK int
}

// Class is a request's priority class.
type Class string

// The priority classes, in service order.
const (
	Critical  Class = config.ClassCritical
	Default   Class = config.ClassDefault
	Sheddable Class = config.ClassSheddable
)

// Priority assigns a request its class from the handler's limits, never
// from a request header: by path prefix (longest wins), then by client
// key, else Default (the zero Class is Default).
type Priority struct {
	Default Class
	Paths   map[string]Class // path prefix → class
	Clients map[string]Class // Client.Key value → class
}

// Batch names the top-level JSON array field whose elements are counted
// while the body streams, and the most it may hold (422 batch-items).
type Batch struct {
	JSONField string
	Max       int
}

// PathLimits are the request-shape limits under one path prefix. A zero
// field is the handler's own; Body negative: no body at all.
type PathLimits struct {
	Body                                             int64
	HeaderBytes, HeaderCount, URLLength, QueryValues int
	Batch                                            Batch
}

// ParseLimits decodes and validates yaml as a `limits:` section of levee's
// config: the same keys, defaults and checks, with errors that name the
// field path (limits.rate: ...). It returns every field set, defaults
// included: empty yaml gives levee's default limits, which NewGate reads
// as it reads Limits{}. limits.bandwidth is refused: it paces a proxy's bytes, which a
// handler does not own. limits.request_buffer, limits.response_buffer and
// limits.response_spill are the proxy's buffer sizes and mean nothing
// here; they are checked, not kept.
func ParseLimits(yaml []byte) (Limits, error) {
	c, err := config.ParseLimits(yaml)
	if err != nil {
		return Limits{}, err
	}
	if c.Bandwidth.Rate != 0 {
		return Limits{}, config.Errors{{Path: "limits.bandwidth",
			Msg: "not applied by the admission middleware: it paces the bytes a proxy relays; leave it to levee"}}
	}
	return fromConfig(c), nil
}

// none is how config writes "none" where Limits writes a negative value.
func none[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// orNone is none's inverse: a negative value is config's 0, a zero one
// keeps def.
func orNone[T ~int | ~int64](v, def T) T {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}

// or is v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// config is l as the config package writes it, over levee's defaults, and
// validated.
func (l Limits) config() (config.Limits, error) {
	c := config.DefaultApp().Limits
	c.Concurrency.Limit = or(l.Concurrency, c.Concurrency.Limit)
	if a := l.Adaptive; a != nil {
		c.Concurrency.Adaptive = config.AdaptiveGradient
		c.Concurrency.Min, c.Concurrency.Max = or(a.Min, c.Concurrency.Min), or(a.Max, c.Concurrency.Max)
	}
	q := &c.Queue
	q.MaxLen = orNone(l.Queue.MaxLen, q.MaxLen)
	q.MaxWait = config.Duration(orNone(l.Queue.MaxWait, q.MaxWait.D()))
	q.Target = config.Duration(or(l.Queue.Target, q.Target.D()))
	q.Interval = config.Duration(or(l.Queue.Interval, q.Interval.D()))
	c.Rate, c.Burst = config.Rate(l.Rate), l.Burst
	cl := &c.Client
	cl.Key = or(l.Client.Key, cl.Key)
	cl.Rate, cl.Burst = config.Rate(l.Client.Rate), l.Client.Burst
	cl.MaxKeys = or(l.Client.MaxKeys, cl.MaxKeys)
	cl.TopK = orNone(l.Client.TopK, cl.TopK)
	c.FairShare = l.FairShare
	c.Priority = config.Priority{Default: string(or(l.Priority.Default, Default)),
		Paths: classes(l.Priority.Paths), Clients: classes(l.Priority.Clients)}
	c.Body = config.ByteSize(orNone(l.Body, int64(c.Body)))
	c.HeaderBytes = config.ByteSize(or(l.HeaderBytes, int(c.HeaderBytes)))
	c.HeaderCount = or(l.HeaderCount, c.HeaderCount)
	c.URLLength = config.ByteSize(or(l.URLLength, int(c.URLLength)))
	c.QueryValues = or(l.QueryValues, c.QueryValues)
	c.Batch = config.Batch(l.Batch)
	if len(l.PerPath) > 0 {
		c.PerPath = make(map[string]*config.PathLimits, len(l.PerPath))
		for prefix, p := range l.PerPath {
			c.PerPath[prefix] = p.config()
		}
	}
	for _, r := range l.Shadow {
		c.Shadow = append(c.Shadow, string(r))
	}
	return c, config.ValidateLimits(c)
}

// config is p as the config package writes it: config's inherit (-1) for
// a zero field.
func (p PathLimits) config() *config.PathLimits {
	inherit := func(v int) int { return or(v, -1) }
	body := config.ByteSize(-1)
	switch {
	case p.Body < 0:
		body = 0
	case p.Body > 0:
		body = config.ByteSize(p.Body)
	}
	return &config.PathLimits{Body: body, HeaderBytes: config.ByteSize(inherit(p.HeaderBytes)),
		HeaderCount: inherit(p.HeaderCount), URLLength: config.ByteSize(inherit(p.URLLength)),
		QueryValues: inherit(p.QueryValues), Batch: config.Batch{JSONField: p.Batch.JSONField, Max: inherit(p.Batch.Max)}}
}

// fromConfig is the Limits of validated config: every field set, so
// converting back gives c again (but the proxy's buffer sizes).
func fromConfig(c config.Limits) Limits {
	l := Limits{
		Concurrency: c.Concurrency.Limit,
		Queue: Queue{MaxLen: none(c.Queue.MaxLen), MaxWait: none(c.Queue.MaxWait.D()),
			Target: c.Queue.Target.D(), Interval: c.Queue.Interval.D()},
		Rate: RequestRate(c.Rate), Burst: c.Burst,
		Client: Client{Key: c.Client.Key, Rate: RequestRate(c.Client.Rate), Burst: c.Client.Burst,
			MaxKeys: c.Client.MaxKeys, TopK: none(c.Client.TopK)},
		FairShare: c.FairShare,
		Priority: Priority{Default: Class(c.Priority.Default), Paths: fromClasses(c.Priority.Paths),
			Clients: fromClasses(c.Priority.Clients)},
		Body:        none(int64(c.Body)),
		HeaderBytes: int(c.HeaderBytes), HeaderCount: c.HeaderCount,
		URLLength: int(c.URLLength), QueryValues: c.QueryValues,
		Batch: Batch(c.Batch),
	}
	if c.Concurrency.Adaptive == config.AdaptiveGradient {
		l.Adaptive = &Adaptive{Min: c.Concurrency.Min, Max: c.Concurrency.Max}
	}
	if len(c.PerPath) > 0 {
		l.PerPath = make(map[string]PathLimits, len(c.PerPath))
		for prefix, p := range c.PerPath {
			l.PerPath[prefix] = fromPathLimits(p)
		}
	}
	for _, r := range c.Shadow {
		l.Shadow = append(l.Shadow, Reason(r))
	}
	return l
}

func fromPathLimits(p *config.PathLimits) PathLimits {
	keep := func(v int) int { return max(v, 0) } // config's inherit is our zero
	body := int64(0)
	switch {
	case p.Body == 0:
		body = -1
	case p.Body > 0:
		body = int64(p.Body)
	}
	return PathLimits{Body: body, HeaderBytes: keep(int(p.HeaderBytes)), HeaderCount: keep(p.HeaderCount),
		URLLength: keep(int(p.URLLength)), QueryValues: keep(p.QueryValues),
		Batch: Batch{JSONField: p.Batch.JSONField, Max: keep(p.Batch.Max)}}
}

func classes(m map[string]Class) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, c := range m {
		out[k] = string(or(c, Default))
	}
	return out
}

func fromClasses(m map[string]string) map[string]Class {
	if m == nil {
		return nil
	}
	out := make(map[string]Class, len(m))
	for k, c := range m {
		out[k] = Class(c)
	}
	return out
}
