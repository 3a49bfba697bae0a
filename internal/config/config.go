// Package config is levee's typed configuration: YAML in, defaults applied,
// validated as a whole, then handed out as an immutable value.
//
// A Config returned by Load or Parse has passed Validate; callers must treat
// it as read-only, because a reload swaps whole configs, never edits one.
package config

import (
	"crypto/tls"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole of levee's configuration.
type Config struct {
	// Listen is where the proxy accepts client traffic.
	Listen Listeners `yaml:"listen"`
	// Admin is the admin listener (/metrics, /healthz, /reload); see admin.go.
	Admin    Admin           `yaml:"admin"`
	Server   Server          `yaml:"server"`
	Upstream Upstream        `yaml:"upstream"`
	Log      Log             `yaml:"log"`
	Instance Instance        `yaml:"instance"`
	Overload Overload        `yaml:"overload"`
	Cluster  Cluster         `yaml:"cluster"`
	Apps     map[string]*App `yaml:"apps"`
	// Catalog serves apps from an SQLite file beside Apps (see catalog.go).
	Catalog Catalog `yaml:"catalog"`
	// Checksum is "sha256:" and the hex digest of the config document as
	// read (not of the files it names): which config serves, at a glance.
	Checksum string `yaml:"-"`
	// Tracing exports a span per request over OTLP (see tracing.go).
	Tracing Tracing `yaml:"tracing"`
	// TLS holds settings of TLS beyond one listener or app (acme.go).
	TLS TLSSection `yaml:"tls"`

	// listenCerts are the listeners' certificates as validation loaded
	// them, by index in Listen (nil for a plain one).
	listenCerts []*tls.Certificate
}

// ListenerCertificate is the certificate of Listen[i] as validation
// loaded it, nil for a plain listener (or a Config never validated).
// Each reload reads the files again: a certificate renewed in place (a
// cron job's, or certbot's) is served from the reload on.
func (c *Config) ListenerCertificate(i int) *tls.Certificate {
	if i < len(c.listenCerts) {
		return c.listenCerts[i]
	}
	return nil
}

// Listener is one client-facing address.
type Listener struct {
	Addr string `yaml:"addr"`
	// TLS, when set, serves HTTPS with HTTP/2 negotiated by ALPN.
	TLS *TLS `yaml:"tls"`
	// H2C serves HTTP/2 without TLS (prior knowledge) beside HTTP/1.1.
	H2C bool `yaml:"h2c"`
	// Engine was the HTTP implementation of the whole listener. It is
	// decoded only so that a config naming it is refused with the reason
	// (see Validate) rather than "unknown key": levee now picks the engine
	// per connection, by protocol.
	Engine string `yaml:"engine,omitempty"`
}

// TLS names a certificate and key in PEM files.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Server holds the client-facing protections shared by every listener.
type Server struct {
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a whole response, from the end of the request headers.
	WriteTimeout   Duration `yaml:"write_timeout"`
	IdleTimeout    Duration `yaml:"idle_timeout"`
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// MaxConns is the most open client connections per listener; more are closed at accept.
	MaxConns int `yaml:"max_conns"`
	// TrustedProxies are the peers (IPs or CIDRs) whose X-Forwarded-* and
	// Forwarded headers levee keeps and extends; from anyone else they are replaced.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// DrainTimeout bounds how long SIGTERM waits for in-flight requests.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// MaxConnsPerIP is the most open connections from one client address
	// per listener; trusted_proxies are exempt (they carry many clients).
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// EventLoop serves the HTTP/1.1 connections of listeners, plain or
	// TLS (without h2c), from event loops (internal/h1loop) rather than a
	// goroutine each; linux only, and on by default there.
	EventLoop bool `yaml:"event_loop"`
	// MinRate is the fewest bytes a second a client may send a request body
	// or read a response at, once MinRateGrace has passed; slower clients
	// are cut off. off leaves only read_timeout and write_timeout.
	MinRate      ByteRate `yaml:"min_rate"`
	MinRateGrace Duration `yaml:"min_rate_grace"`
	// BufferMemory bounds the bytes held, across all requests, in request
	// and response buffers (limits.request_buffer, limits.response_buffer).
	BufferMemory ByteSize `yaml:"buffer_memory"`
	// Spill is where responses longer than limits.response_buffer are held
	// for slow clients (limits.response_spill), and how much disk they
	// may take.
	Spill Spill `yaml:"spill"`
}

// Spill is the process's on-disk hold for responses (see package spill).
type Spill struct {
	// Dir is where the files are made (and unlinked at once); "" is the
	// system's temporary directory.
	Dir string `yaml:"dir"`
	// Budget bounds the bytes all spilled responses hold on disk at once;
	// 0 spills nothing.
	Budget ByteSize `yaml:"budget"`
}

// Upstream holds the connection settings toward backends.
type Upstream struct {
	// MaxConnsPerBackend bounds connections (idle and active) to one backend address.
	MaxConnsPerBackend int `yaml:"max_conns_per_backend"`
	// MaxIdlePerBackend 0 turns connection reuse off (a connection per
	// request); any other value keeps every connection that ends an
	// exchange cleanly until IdleTimeout (forward.PoolStats: the pool never
	// churns).
	MaxIdlePerBackend int `yaml:"max_idle_per_backend"`
	// DialRate is the budget of new connections to one backend address:
	// MaxConnsPerBackend at once, then DialRate; a dial beyond it waits
	// for a token or for a connection given back, so client cancels or a
	// backend restart cannot become a dial storm.
	DialRate              Rate     `yaml:"dial_rate"`
	DialTimeout           Duration `yaml:"dial_timeout"`
	ResponseHeaderTimeout Duration `yaml:"response_header_timeout"`
	IdleTimeout           Duration `yaml:"idle_timeout"`
}

// Log configures levee's own logs.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
	// Access is the access log: one JSON line per request, or per sampled
	// request (off by default: it costs).
	Access AccessLog `yaml:"access"`
	// ErrorsPerSecond caps request-path error lines, all events and apps
	// together; the rest are counted and summarised.
	ErrorsPerSecond int `yaml:"errors_per_second"`
	// ErrorsPerEvent caps the lines of one event for one app (e.g. "backend
	// unreachable" for app a) per ErrorsInterval; at the interval's end one
	// "suppressed N similar" line stands for the rest.
	ErrorsPerEvent int      `yaml:"errors_per_event"`
	ErrorsInterval Duration `yaml:"errors_interval"`
}

// App is one tenant: the hosts and paths it claims, its backends and its limits.
type App struct {
	Hosts    []string  `yaml:"hosts"`
	Paths    []string  `yaml:"paths"`
	Backends []Backend `yaml:"backends"`
	Balance  Balance   `yaml:"balance"`
	Health   Health    `yaml:"health"`
	Ejection Ejection  `yaml:"ejection"`
	Retry    Retry     `yaml:"retry"`
	Limits   Limits    `yaml:"limits"`
	// BackendLimits protect the backend pool; off by default.
	BackendLimits BackendLimits `yaml:"backend_limits"`
	// TLS is the app's own certificate for its hosts (nil: the listener's).
	TLS *AppTLS `yaml:"tls"`
	// Upstream is how levee talks to the app's backends (upstream.go);
	// nil, as the zero AppUpstream, is every default. A pointer: every
	// app, stored ones too, holds an App (see Upstreams).
	Upstream *AppUpstream `yaml:"upstream"`
}

// Health configures active health checks; off unless Path is set or GRPC
// is. Probes speak the app's upstream protocol.
type Health struct {
	Path      string   `yaml:"path"`
	Interval  Duration `yaml:"interval"`
	Timeout   Duration `yaml:"timeout"`
	Healthy   int      `yaml:"healthy"`   // passed probes in a row to mark a backend healthy
	Unhealthy int      `yaml:"unhealthy"` // failed probes in a row to mark it unhealthy
	// GRPC probes with the gRPC health protocol (grpc.health.v1.Health/Check)
	// instead of a GET of Path: only over HTTP/2 (upstream.protocol h2c or h2).
	GRPC bool `yaml:"grpc"`
	// Service is the gRPC service whose health is asked; "" is the whole server.
	Service string `yaml:"service"`
}

// GRPCHealthPath is the method health.grpc calls.
const GRPCHealthPath = "/grpc.health.v1.Health/Check"

// MaxGRPCService bounds apps.NAME.health.service, a gRPC service's full
// name.
const MaxGRPCService = 1024

// On reports whether active health checks are on.
func (h *Health) On() bool { return h.Path != "" || h.GRPC }

// Ejection configures passive outlier ejection: a backend that fails
// ConsecutiveFailures requests in a row (connect errors, timeouts, 5xx) is
// taken out of balancing for BaseTime, doubling on repeats up to MaxTime.
type Ejection struct {
	ConsecutiveFailures int      `yaml:"consecutive_failures"`
	BaseTime            Duration `yaml:"base_time"`
	MaxTime             Duration `yaml:"max_time"`
	// MaxEjected bounds the share of an app's backends ejected at once;
	// 0% turns ejection off.
	MaxEjected Percent `yaml:"max_ejected"`
}

// Retry says when a failed request is tried again on another backend.
// Only a safe retry is made (see docs/config.md): a connect error, when
// nothing of the request was sent, for any method; a listed status for an
// idempotent method whose body can be sent again.
type Retry struct {
	// On lists what is retried: RetryConnect and the statuses "502", "503", "504".
	On []string `yaml:"on"`
	// Budget caps retries at this share of the app's requests over a
	// sliding window (plus MinPerWindow); 0% turns retries off.
	Budget Percent `yaml:"budget"`
	// Attempts is the most tries of one request, the first included; 1
	// turns retries off.
	Attempts int `yaml:"attempts"`
	// MinPerWindow retries are allowed per window beyond Budget, so an app
	// with little traffic can still retry; 0 keeps the budget strict.
	MinPerWindow int `yaml:"min_per_window"`
}

// RetryConnect in Retry.On retries a request whose backend refused or did
// not accept the connection.
const RetryConnect = "connect"

// The balancing policies.
const (
	BalanceP2C        = "p2c"
	BalanceRoundRobin = "round_robin"
	BalanceWeighted   = "weighted"
	BalanceHash       = "hash"
)

// Balance chooses how an app's requests spread over its backends. It is
// written as a policy name (`balance: round_robin`) or a mapping
// (`balance: {hash: {key: header:X-User}}`).
type Balance struct {
	// Policy is p2c (default: power of two choices over in-flight requests
	// and latency), round_robin, weighted (smooth weighted round robin) or hash.
	Policy string `yaml:"policy"`
	Hash   Hash   `yaml:"hash"`
	// ImbalanceAlert raises levee_backend_imbalance_alert (and logs once)
	// when max/mean of the backends' weight-normalised shares over the last
	// minute exceeds it.
	ImbalanceAlert float64 `yaml:"imbalance_alert"`
}

// Hash configures consistent hashing with bounded load.
type Hash struct {
	// Key is where the hash key comes from: header:NAME, cookie:NAME or ip.
	Key string `yaml:"key"`
	// Load bounds a backend's in-flight requests to Load × the average, so
	// one hot key cannot overload one backend.
	Load float64 `yaml:"load"`
}

func (b *Balance) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	def := b.Policy
	b.Policy = ""
	decodeShorthand(n, path, errs, b, &b.Policy)
	switch {
	case b.Policy != "":
	case b.Hash.Key != "":
		b.Policy = BalanceHash // {hash: {key: ...}} names the policy by itself
	default:
		b.Policy = def
	}
}

// Limits are an app's admission limits. Every app has them, configured or not.
type Limits struct {
	// Concurrency is the most requests of the app in flight to its backends:
	// a number, or an adaptive limit {adaptive: gradient, min, max}.
	Concurrency Concurrency `yaml:"concurrency"`
	Queue       Queue       `yaml:"queue"`
	// Body is the largest request body accepted; larger ones get 413.
	Body ByteSize `yaml:"body"`
	// RequestBuffer is how much of a request body is read before the request
	// takes a concurrency slot: a body this size or smaller reaches the
	// backend whole, however slowly the client sends it.
	RequestBuffer ByteSize `yaml:"request_buffer"`
	// ResponseBuffer is the largest response (by Content-Length) read whole
	// from the backend before it is sent on, so the slot is given back when
	// the backend is done rather than when a slow client is.
	ResponseBuffer ByteSize `yaml:"response_buffer"`
	// ResponseSpill is the largest response (by Content-Length) held on
	// disk, past its first response_buffer bytes, when it is longer than
	// response_buffer (server.spill); 0 holds none on disk.
	ResponseSpill ByteSize `yaml:"response_spill"`
	// HeaderBytes bounds the request header block (names and values; 431).
	HeaderBytes ByteSize `yaml:"header_bytes"`
	// HeaderCount bounds the number of request header fields (431).
	HeaderCount int `yaml:"header_count"`
	// URLLength bounds the request target, path and query (414).
	URLLength ByteSize `yaml:"url_length"`
	// QueryValues bounds the number of query parameters (414).
	QueryValues int `yaml:"query_values"`
	// Batch bounds the items of a JSON array field in the body (422); off
	// unless json_field is set.
	Batch Batch `yaml:"batch"`
	// Rate is the app's request rate (GCRA: exact over any window); the
	// zero value turns it off.
	Rate Rate `yaml:"rate"`
	// Burst is how many requests may come at once above Rate; 0 means
	// Rate per second ÷ 10, at least 1.
	Burst int `yaml:"burst"`
	// Client limits each client (by key) inside the app.
	Client ClientLimit `yaml:"client"`
	// Bandwidth paces the app's request and response bytes together.
	Bandwidth Bandwidth `yaml:"bandwidth"`
	// FairShare refuses, when the app is at its concurrency limit, a client
	// (by limits.client.key) holding more than limit ÷ active clients slots
	// before any client within its share.
	FairShare bool `yaml:"fair_share"`
	// Priority sorts requests into critical, default and sheddable.
	Priority Priority `yaml:"priority"`
	// PerPath overrides the request-shape limits (body, header_bytes,
	// header_count, url_length, query_values, batch) under path prefixes;
	// the longest prefix wins.
	PerPath map[string]*PathLimits `yaml:"per_path"`
	// Shadow lists the refusal reasons counted instead of refused; the
	// request goes on, marked Levee-Shadow.
	Shadow Shadow `yaml:"shadow"`
}

// Bandwidth is a byte rate shared by all of an app's connections, both
// directions. It is written `bandwidth: 50MB/s` or
// `bandwidth: {rate: 50MB/s, max_delay: 5s}`.
type Bandwidth struct {
	// Rate in bytes per second; 0 (off) by default.
	Rate ByteRate `yaml:"rate"`
	// MaxDelay is the longest a transfer may be held for its next chunk
	// before it is cut (and counted).
	MaxDelay Duration `yaml:"max_delay"`
}

func (b *Bandwidth) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	decodeShorthand(n, path, errs, b, &b.Rate)
}

// The priority classes, in service order.
const (
	ClassCritical  = "critical"
	ClassDefault   = "default"
	ClassSheddable = "sheddable"
)

// Priority assigns a class to each request from levee's config, never from
// a request header: by path prefix (longest wins), then by client key.
type Priority struct {
	Default string            `yaml:"default"`
	Paths   map[string]string `yaml:"paths"`   // path prefix → class
	Clients map[string]string `yaml:"clients"` // limits.client.key value → class
}

// ClientLimit is a rate limit per client of an app.
type ClientLimit struct {
	// Key says who the client is: ip (the peer address) or header:NAME.
	// Requests without the header share one bucket, so omitting it gains nothing.
	Key   string `yaml:"key"`
	Rate  Rate   `yaml:"rate"`
	Burst int    `yaml:"burst"`
	// MaxKeys bounds the clients tracked at once; past it, new clients
	// share one bucket (never a fresh burst for an evicted client).
	MaxKeys int `yaml:"max_keys"`
	// TopK is how many of the heaviest clients (by requests, and by
	// rejections) the app reports in metrics and the admin API; 0 is off.
	TopK int `yaml:"top_k"`
}

// EffectiveBurst is burst, or its default for rate: rate per second ÷ 10, at least 1.
func EffectiveBurst(r Rate, burst int) int {
	if burst > 0 {
		return burst
	}
	return max(1, int(math.Ceil(r.PerSecond()/10)))
}

// Concurrency is a static limit, or an adaptive one that follows the
// backends' latency between Min and Max. It is written `concurrency: 256`
// or `concurrency: {adaptive: gradient, min: 8, max: 1024}`.
type Concurrency struct {
	// Limit is the static limit (used when Adaptive is off).
	Limit int `yaml:"limit"`
	// Adaptive is off or gradient (Gradient2, see internal/admit/limit).
	Adaptive string `yaml:"adaptive"`
	// Min is the adaptive limit's floor; Max its ceiling.
	Min int `yaml:"min"`
	Max int `yaml:"max"`
}

// The adaptive concurrency algorithms.
const (
	AdaptiveOff      = "off"
	AdaptiveGradient = "gradient"
)

func (c *Concurrency) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	decodeShorthand(n, path, errs, c, &c.Limit)
}

// Batch names the top-level JSON array field whose elements are counted
// while the body streams, and the most it may hold.
type Batch struct {
	JSONField string `yaml:"json_field"`
	Max       int    `yaml:"max"`
}

// Queue bounds the wait for a concurrency slot.
type Queue struct {
	// MaxWait is the longest a request waits for a slot; 0 means no waiting.
	MaxWait Duration `yaml:"max_wait"`
	// MaxLen is the most requests waiting at once; 0 means no queue.
	MaxLen int `yaml:"max_len"`
	// Target is the queueing delay the queue should stay under: when even
	// the shortest wait stayed above it for Interval, the queue is overloaded
	// and sheds (CoDel-style: sheddable first, waits cut to 2×Target, LIFO).
	Target   Duration `yaml:"target"`
	Interval Duration `yaml:"interval"`
}

// Defaults. Each is documented in docs/config.md; change both together.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultAdmin             = "127.0.0.1:9901"
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 5 * time.Minute
	DefaultWriteTimeout      = 5 * time.Minute
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 10000
	DefaultDrainTimeout      = 30 * time.Second
	DefaultMaxConnsPerIP     = 4096
	// DefaultEventLoop: the event loops where there are any (linux).
	DefaultEventLoop             = runtime.GOOS == "linux"
	DefaultMinRate               = 1 << 10
	DefaultMinRateGrace          = 10 * time.Second
	DefaultBufferMemory          = 256 << 20
	DefaultRequestBuffer         = 1 << 20
	DefaultResponseBuffer        = 64 << 10
	DefaultResponseSpill         = 8 << 20
	MaxResponseSpill             = 1 << 40
	DefaultSpillBudget           = 1 << 30
	MaxSpillBudget               = 1 << 40
	MaxRequestBuffer             = 16 << 20
	DefaultMaxConnsPerBackend    = 1024
	DefaultMaxIdlePerBackend     = 64
	DefaultDialRate              = 256 // a second
	DefaultDialTimeout           = 2 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	DefaultUpstreamIdleTimeout   = 90 * time.Second
	DefaultErrorsPerSecond       = 10
	DefaultErrorsPerEvent        = 5
	DefaultErrorsInterval        = 10 * time.Second
	DefaultConcurrency           = 1024
	DefaultAdaptiveMin           = 8
	DefaultAdaptiveMax           = 1024
	DefaultQueueMaxWait          = 50 * time.Millisecond
	DefaultQueueMaxLen           = 1024
	DefaultQueueTarget           = 5 * time.Millisecond
	DefaultQueueInterval         = 100 * time.Millisecond
	DefaultBody                  = 10 * 1000 * 1000
	DefaultHashLoad              = 1.25
	DefaultBandwidthMaxDelay     = 5 * time.Second
	DefaultHealthInterval        = 5 * time.Second
	DefaultHealthTimeout         = time.Second
	DefaultHealthy               = 2
	DefaultUnhealthy             = 3
	DefaultConsecutiveFailures   = 5
	DefaultEjectionBase          = 30 * time.Second
	DefaultEjectionMax           = 5 * time.Minute
	DefaultMaxEjected            = 50
	DefaultRetryBudget           = 20
	DefaultRetryAttempts         = 2
	MaxRetryAttempts             = 5
	DefaultImbalanceAlert        = 1.5
	DefaultClientMaxKeys         = 100_000
	DefaultClientTopK            = 16
	DefaultHeaderBytes           = 64 << 10
	DefaultHeaderCount           = 100
	DefaultURLLength             = 8 << 10
	DefaultQueryValues           = 256
)

// Bounds that keep every limit finite: "unlimited" cannot be configured.
const (
	MaxConcurrency = 1 << 20
	MaxQueueLen    = 1 << 20
	MaxQueueWait   = time.Minute
)

// Default returns a Config with every default filled in and no apps.
func Default() Config {
	return Config{
		Listen: Listeners{{Addr: DefaultListen}},
		Admin:  Admin{Addr: DefaultAdmin},
		Server: Server{
			ReadHeaderTimeout: Duration(DefaultReadHeaderTimeout),
			ReadTimeout:       Duration(DefaultReadTimeout),
			WriteTimeout:      Duration(DefaultWriteTimeout),
			IdleTimeout:       Duration(DefaultIdleTimeout),
			MaxHeaderBytes:    DefaultMaxHeaderBytes,
			MaxConns:          DefaultMaxConns,
			DrainTimeout:      Duration(DefaultDrainTimeout),
			MaxConnsPerIP:     DefaultMaxConnsPerIP,
			EventLoop:         DefaultEventLoop,
			MinRate:           DefaultMinRate,
			MinRateGrace:      Duration(DefaultMinRateGrace),
			BufferMemory:      DefaultBufferMemory,
			Spill:             Spill{Budget: DefaultSpillBudget},
		},
		Upstream: Upstream{
			MaxConnsPerBackend:    DefaultMaxConnsPerBackend,
			MaxIdlePerBackend:     DefaultMaxIdlePerBackend,
			DialRate:              Rate{Events: DefaultDialRate, Per: time.Second},
			DialTimeout:           Duration(DefaultDialTimeout),
			ResponseHeaderTimeout: Duration(DefaultResponseHeaderTimeout),
			IdleTimeout:           Duration(DefaultUpstreamIdleTimeout),
		},
		Log:      DefaultLog(),
		Instance: DefaultInstance(),
		Overload: DefaultOverload(),
		Cluster:  DefaultCluster(),
		Catalog:  DefaultCatalog(),
		Tracing:  DefaultTracing(),
		TLS:      DefaultTLS(),
	}
}

// DefaultApp returns an App with every default limit; decoding fills the rest.
func DefaultApp() *App {
	return &App{
		Paths:   []string{"/"},
		Balance: Balance{Policy: BalanceP2C, Hash: Hash{Load: DefaultHashLoad}, ImbalanceAlert: DefaultImbalanceAlert},
		Health: Health{Interval: Duration(DefaultHealthInterval), Timeout: Duration(DefaultHealthTimeout),
			Healthy: DefaultHealthy, Unhealthy: DefaultUnhealthy},
		Ejection: Ejection{ConsecutiveFailures: DefaultConsecutiveFailures, BaseTime: Duration(DefaultEjectionBase),
			MaxTime: Duration(DefaultEjectionMax), MaxEjected: DefaultMaxEjected},
		Retry: Retry{On: []string{RetryConnect}, Budget: DefaultRetryBudget, Attempts: DefaultRetryAttempts},
		Limits: Limits{
			Concurrency: Concurrency{Limit: DefaultConcurrency, Adaptive: AdaptiveOff, Min: DefaultAdaptiveMin, Max: DefaultAdaptiveMax},
			Queue: Queue{MaxWait: Duration(DefaultQueueMaxWait), MaxLen: DefaultQueueMaxLen,
				Target: Duration(DefaultQueueTarget), Interval: Duration(DefaultQueueInterval)},
			Body:           DefaultBody,
			RequestBuffer:  DefaultRequestBuffer,
			ResponseBuffer: DefaultResponseBuffer,
			ResponseSpill:  DefaultResponseSpill,
			HeaderBytes:    DefaultHeaderBytes,
			HeaderCount:    DefaultHeaderCount,
			URLLength:      DefaultURLLength,
			QueryValues:    DefaultQueryValues,
			Client:         ClientLimit{Key: "ip", MaxKeys: DefaultClientMaxKeys, TopK: DefaultClientTopK},
			Priority:       Priority{Default: ClassDefault},
			Bandwidth:      Bandwidth{MaxDelay: Duration(DefaultBandwidthMaxDelay)},
		},
	}
}

// newElem lets the decoder start each map value from its defaults.
func (*App) newElem() any { return DefaultApp() }

// Listeners accepts one address, a list of addresses, or a list of listener mappings.
type Listeners []Listener

func (l *Listeners) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = Listeners{{Addr: n.Value}}
	case yaml.SequenceNode:
		out := make(Listeners, len(n.Content))
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch e = resolve(e); {
			case isNull(e):
				errs.add(p, "empty list item")
			case e.Kind == yaml.ScalarNode:
				out[i].Addr = e.Value
			default:
				decodeValue(e, reflect.ValueOf(&out[i]).Elem(), p, errs)
			}
		}
		*l = out
	default:
		errs.add(path, "want an address or a list of listeners, got a %s", kindName(n))
	}
}

// Backend is one upstream address of an app, with a relative weight.
type Backend struct {
	Addr   string `yaml:"addr"`
	Weight int    `yaml:"weight"`
}

// decodeYAML accepts "host:port" or {addr: host:port, weight: N}.
func (b *Backend) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	b.Weight = 1
	decodeShorthand(n, path, errs, b, &b.Addr)
}
