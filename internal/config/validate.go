package config

import (
	"crypto/tls"
	"fmt"
	"github.com/leveeproxy/levee/internal/bandwidth"
	"github.com/leveeproxy/levee/internal/clientkey"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate checks the whole config and returns Errors listing every problem
// with its field path, or nil. It reads the files the config names (TLS
// certificates and keys, admin.token_file) to prove they load, each through
// a Files of its own.
func (c *Config) Validate() error { return c.validate(ownReader()) }

func (c *Config) validate(rd reader) error {
	var errs Errors
	addrs := map[string]string{} // listen address → field path, to catch reuse
	claim := func(path, addr string) {
		if prev, ok := addrs[addr]; ok && !strings.HasSuffix(addr, ":0") {
			errs.add(path, "address %s is already used by %s", addr, prev)
		}
		addrs[addr] = path
	}
	if len(c.Listen) == 0 {
		errs.add("listen", "at least one listener is required")
	}
	c.listenCerts = nil // made for the first TLS listener: a plain config stays Default()'s
	for i, l := range c.Listen {
		p := fmt.Sprintf("listen[%d]", i)
		checkListenAddr(&errs, p+".addr", l.Addr)
		claim(p+".addr", l.Addr)
		if l.TLS != nil {
			if c.listenCerts == nil {
				c.listenCerts = make([]*tls.Certificate, len(c.Listen))
			}
			c.listenCerts[i] = checkTLS(&errs, rd, p+".tls", l.TLS)
			if l.H2C {
				errs.add(p+".h2c", "h2c is for listeners without tls (a TLS listener negotiates HTTP/2 by ALPN)")
			}
		}
		if l.Engine != "" {
			errs.add(p+".engine", "no longer a setting: levee picks the engine per connection, HTTP/1.x on "+
				"fasthttp and HTTP/2 on net/http (by ALPN with tls, by the connection preface with h2c); "+
				"delete the key (docs/config.md, listen)")
		}
	}
	c.Admin.validate(&errs, rd)
	claim("admin.addr", c.Admin.Addr)
	c.Server.validate(&errs)
	c.Upstream.validate(&errs)
	c.Log.validate(&errs)
	c.Instance.validate(&errs)
	c.Overload.validate(&errs)
	c.Cluster.validate(&errs)
	c.Tracing.validate(&errs)
	c.Catalog.validate(&errs)
	routes := map[string]string{} // host+path → app, to catch two apps claiming one route
	usesACME := false
	for _, name := range c.AppNames() {
		validateApp(&errs, name, c.Apps[name], routes)
		if a := c.Apps[name]; a != nil && a.TLS != nil {
			checkAppTLS(&errs, &rd, "apps."+name+".tls", a.TLS, true)
			usesACME = usesACME || a.TLS.ACME()
		}
		if a := c.Apps[name]; a != nil && a.Upstream != nil {
			validateAppUpstream(&errs, &rd, "apps."+name+".upstream", a.Upstream)
		}
	}
	c.TLS.ACME.validate(&errs, rd, usesACME, c.Catalog.On())
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// AppNames returns the app names in sorted order, for deterministic output.
func (c *Config) AppNames() []string {
	names := make([]string, 0, len(c.Apps))
	for n := range c.Apps {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func checkListenAddr(errs *Errors, path, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		errs.add(path, "%q is not host:port", addr)
		return
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		errs.add(path, "host %q must be an IP address or localhost", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs.add(path, "port %q must be 0..65535", port)
	}
}

// checkTLS loads t's certificate, nil if it does not load.
func checkTLS(errs *Errors, rd reader, path string, t *TLS) *tls.Certificate {
	if t.Cert == "" || t.Key == "" {
		errs.add(path, "both cert and key are required")
		return nil
	}
	pair, err := loadCertificate(rd, path, t)
	if err != nil {
		*errs = append(*errs, err.(FieldError))
		return nil
	}
	return &pair
}

func positive(errs *Errors, path string, d Duration) {
	if d <= 0 {
		errs.add(path, "must be > 0 (got %s)", d)
	}
}

func within(errs *Errors, path string, v, lo, hi int) {
	if v < lo || v > hi {
		errs.add(path, "must be %d..%d (got %d)", lo, hi, v)
	}
}

func (s *Server) validate(errs *Errors) {
	positive(errs, "server.read_header_timeout", s.ReadHeaderTimeout)
	positive(errs, "server.read_timeout", s.ReadTimeout)
	positive(errs, "server.write_timeout", s.WriteTimeout)
	positive(errs, "server.idle_timeout", s.IdleTimeout)
	positive(errs, "server.drain_timeout", s.DrainTimeout)
	if s.MaxHeaderBytes < 1024 || s.MaxHeaderBytes > 16<<20 {
		errs.add("server.max_header_bytes", "must be 1KiB..16MiB (got %d)", s.MaxHeaderBytes)
	}
	within(errs, "server.max_conns", s.MaxConns, 1, 10_000_000)
	within(errs, "server.max_conns_per_ip", s.MaxConnsPerIP, 1, 10_000_000)
	if s.EventLoop && runtime.GOOS != "linux" {
		errs.add("server.event_loop", "needs linux (this is %s)", runtime.GOOS)
	}
	if s.MinRate < 0 || s.MinRate > 1<<30 {
		errs.add("server.min_rate", "must be off or 1B/s..1GiB/s (got %d)", s.MinRate)
	}
	positive(errs, "server.min_rate_grace", s.MinRateGrace)
	if s.BufferMemory < 1<<20 || s.BufferMemory > 1<<40 {
		errs.add("server.buffer_memory", "must be 1MiB..1024GiB (got %d)", s.BufferMemory)
	}
	if s.Spill.Budget < 0 || s.Spill.Budget > MaxSpillBudget {
		errs.add("server.spill.budget", "must be 0..1024GiB (got %d)", s.Spill.Budget)
	}
	if d := s.Spill.Dir; d != "" && !filepath.IsAbs(d) {
		errs.add("server.spill.dir", "must be an absolute path (got %q)", d)
	}
	for i, p := range s.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			errs.add(fmt.Sprintf("server.trusted_proxies[%d]", i), "%v", err)
		}
	}
}

// TrustedPrefixes returns server.trusted_proxies parsed; call it only on a validated config.
func (s *Server) TrustedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.TrustedProxies))
	for _, p := range s.TrustedProxies {
		if pr, err := parsePrefix(p); err == nil {
			out = append(out, pr)
		}
	}
	return out
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP or CIDR", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP or CIDR", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

func (u *Upstream) validate(errs *Errors) {
	within(errs, "upstream.max_conns_per_backend", u.MaxConnsPerBackend, 1, 1_000_000)
	// The idle bound depends on the connection bound; check it only against a valid one.
	if u.MaxConnsPerBackend >= 1 && u.MaxConnsPerBackend <= 1_000_000 {
		within(errs, "upstream.max_idle_per_backend", u.MaxIdlePerBackend, 0, u.MaxConnsPerBackend)
	}
	if u.DialRate.PerSecond() == 0 {
		errs.add("upstream.dial_rate", "must be set (e.g. 256/s)")
	}
	positive(errs, "upstream.dial_timeout", u.DialTimeout)
	positive(errs, "upstream.response_header_timeout", u.ResponseHeaderTimeout)
	positive(errs, "upstream.idle_timeout", u.IdleTimeout)
}

func validateApp(errs *Errors, name string, a *App, routes map[string]string) {
	p := "apps." + name
	if a == nil {
		errs.add(p, "an app needs hosts and backends")
		return
	}
	if !validName(name) {
		errs.add(p, "app names use letters, digits, '-', '_' and '.' (max 128)")
	}
	if len(a.Hosts) == 0 {
		errs.add(p+".hosts", "at least one host is required")
	}
	if len(a.Paths) == 0 {
		errs.add(p+".paths", "at least one path prefix is required (use / for all)")
	}
	for i, h := range a.Hosts {
		if err := checkHost(h); err != nil {
			errs.add(fmt.Sprintf("%s.hosts[%d]", p, i), "%v", err)
		}
	}
	for i, path := range a.Paths {
		if !strings.HasPrefix(path, "/") {
			errs.add(fmt.Sprintf("%s.paths[%d]", p, i), "%q must start with /", path)
		}
	}
	checkRoutes(errs, p, name, a, routes)
	if len(a.Backends) == 0 {
		errs.add(p+".backends", "at least one backend is required")
	}
	seen := map[string]bool{}
	for i, b := range a.Backends {
		bp := fmt.Sprintf("%s.backends[%d]", p, i)
		checkBackend(errs, bp, b)
		if seen[b.Addr] {
			errs.add(bp, "backend %s is listed twice", b.Addr)
		}
		seen[b.Addr] = true
	}
	validateBalance(errs, p+".balance", a.Balance)
	if h := a.Health; h.Service != "" && !h.GRPC {
		errs.add(p+".health.service", "only with health.grpc: true")
	} else if len(h.Service) > MaxGRPCService || !utf8.ValidString(h.Service) {
		errs.add(p+".health.service", "must be UTF-8 of at most %d bytes", MaxGRPCService)
	}
	if h := a.Health; h.On() {
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			errs.add(p+".health.path", "%q must start with /", h.Path)
		}
		if up := a.Upstreams(); h.GRPC && !up.HTTP2() {
			errs.add(p+".health.grpc", "a gRPC health check is an HTTP/2 call: needs upstream.protocol h2c or h2 (got %s)", up.Protocol)
		}
		if h.GRPC && h.Path != "" {
			errs.add(p+".health.path", "not with health.grpc, which calls %s", GRPCHealthPath)
		}

		if h.Interval < Duration(100*time.Millisecond) || h.Interval > Duration(time.Hour) {
			errs.add(p+".health.interval", "must be 100ms..1h (got %s)", h.Interval)
		}
		if h.Timeout <= 0 || h.Timeout > h.Interval {
			errs.add(p+".health.timeout", "must be > 0 and ≤ health.interval (got %s)", h.Timeout)
		}
		within(errs, p+".health.healthy", h.Healthy, 1, 100)
		within(errs, p+".health.unhealthy", h.Unhealthy, 1, 100)
	}
	e := a.Ejection
	within(errs, p+".ejection.consecutive_failures", e.ConsecutiveFailures, 1, 10_000)
	positive(errs, p+".ejection.base_time", e.BaseTime)
	if e.MaxTime < e.BaseTime {
		errs.add(p+".ejection.max_time", "must be ≥ ejection.base_time (got %s)", e.MaxTime)
	}
	validateRetry(errs, p+".retry", a.Retry)
	validatePool(errs, p, a.BackendLimits)
	validateLimits(errs, p+".limits", a.Limits)
}

// validateLimits checks a limits mapping; p is its path (apps.NAME.limits,
// or limits for ParseLimits).
func validateLimits(errs *Errors, p string, l Limits) {
	switch c := l.Concurrency; c.Adaptive {
	case AdaptiveOff:
		within(errs, p+".concurrency", c.Limit, 1, MaxConcurrency)
	case AdaptiveGradient:
		within(errs, p+".concurrency.min", c.Min, 1, MaxConcurrency)
		within(errs, p+".concurrency.max", c.Max, max(c.Min, 1), MaxConcurrency)
	default:
		errs.add(p+".concurrency.adaptive", "must be off or gradient (got %q)", c.Adaptive)
	}
	within(errs, p+".queue.max_len", l.Queue.MaxLen, 0, MaxQueueLen)
	if l.Queue.Target < Duration(time.Millisecond) || l.Queue.Target.D() > MaxQueueWait {
		errs.add(p+".queue.target", "must be 1ms..%s (got %s)", MaxQueueWait, l.Queue.Target)
	}
	if l.Queue.Interval < Duration(10*time.Millisecond) || l.Queue.Interval.D() > MaxQueueWait {
		errs.add(p+".queue.interval", "must be 10ms..%s (got %s)", MaxQueueWait, l.Queue.Interval)
	}
	if l.Queue.MaxWait < 0 || l.Queue.MaxWait.D() > MaxQueueWait {
		errs.add(p+".queue.max_wait", "must be 0..%s (got %s)", MaxQueueWait, l.Queue.MaxWait)
	}
	validateShape(errs, p, l)
	validatePerPath(errs, p, l)
	if l.Burst < 0 || l.Burst > 1_000_000 {
		errs.add(p+".burst", "must be 0..1000000 (got %d)", l.Burst)
	}
	if l.Burst > 0 && l.Rate.PerSecond() == 0 {
		errs.add(p+".burst", "needs limits.rate")
	}
	c := l.Client
	if c.Key != "ip" {
		if k, err := clientkey.Parse(c.Key); err != nil || !k.IsHeader() {
			errs.add(p+".client.key", "must be ip or header:NAME (got %q)", c.Key)
		}
	}
	if c.Burst < 0 || c.Burst > 1_000_000 {
		errs.add(p+".client.burst", "must be 0..1000000 (got %d)", c.Burst)
	}
	if c.Burst > 0 && c.Rate.PerSecond() == 0 {
		errs.add(p+".client.burst", "needs limits.client.rate")
	}
	within(errs, p+".client.max_keys", c.MaxKeys, 64, 100_000_000)
	within(errs, p+".client.top_k", c.TopK, 0, 1000)
	if bw := l.Bandwidth; bw.Rate != 0 {
		if bw.MaxDelay < Duration(10*time.Millisecond) || bw.MaxDelay.D() > time.Hour {
			errs.add(p+".bandwidth.max_delay", "must be 10ms..1h (got %s)", bw.MaxDelay)
		} else if err := (bandwidth.Options{Rate: int64(bw.Rate), MaxDelay: bw.MaxDelay.D()}).WithDefaults().Validate(); err != nil {
			errs.add(p+".bandwidth", "%v", err) // e.g. max_delay shorter than one chunk at this rate
		}
	}
	l.Shadow.validate(errs, p+".shadow")
	checkClass(errs, p+".priority.default", l.Priority.Default)
	for _, path := range sortedKeys(l.Priority.Paths) {
		if !strings.HasPrefix(path, "/") {
			errs.add(p+".priority.paths."+path, "a path prefix must start with /")
		}
		checkClass(errs, p+".priority.paths."+path, l.Priority.Paths[path])
	}
	for _, key := range sortedKeys(l.Priority.Clients) {
		checkClass(errs, p+".priority.clients."+key, l.Priority.Clients[key])
	}
}

// validateShape checks the request-shape limits of l; p is the path of the
// limits mapping (an app's limits or one limits.per_path entry).
func validateShape(errs *Errors, p string, l Limits) {
	if l.Body < 0 || l.Body > 1<<40 {
		errs.add(p+".body", "must be 0..1TiB (got %d)", l.Body)
	}
	if l.RequestBuffer < 0 || l.RequestBuffer > MaxRequestBuffer {
		errs.add(p+".request_buffer", "must be 0..16MiB (got %d)", l.RequestBuffer)
	}
	if l.ResponseBuffer < 0 || l.ResponseBuffer > MaxRequestBuffer {
		errs.add(p+".response_buffer", "must be 0..16MiB (got %d)", l.ResponseBuffer)
	}
	if l.ResponseSpill < 0 || l.ResponseSpill > MaxResponseSpill {
		errs.add(p+".response_spill", "must be 0..1024GiB (got %d)", l.ResponseSpill)
	}
	if l.HeaderBytes < 1 || l.HeaderBytes > 16<<20 {
		errs.add(p+".header_bytes", "must be 1..16MiB (got %d)", l.HeaderBytes)
	}
	within(errs, p+".header_count", l.HeaderCount, 1, 10_000)
	if l.URLLength < 1 || l.URLLength > 1<<20 {
		errs.add(p+".url_length", "must be 1..1MiB (got %d)", l.URLLength)
	}
	within(errs, p+".query_values", l.QueryValues, 1, 100_000)
	switch b := l.Batch; {
	case b.JSONField == "" && b.Max != 0:
		errs.add(p+".batch.json_field", "is required when batch.max is set")
	case b.JSONField != "":
		within(errs, p+".batch.max", b.Max, 1, 10_000_000)
	}
}

// checkRoutes claims a's host and path pairs in routes, reporting pairs that
// an earlier app (which keeps them) claimed: once per such app, not once per
// pair, so copying an app with many hosts and paths does not flood the output.
func checkRoutes(errs *Errors, p, name string, a *App, routes map[string]string) {
	type clash struct {
		host, path string
		n          int
	}
	clashes := map[string]*clash{}
	var order []string
	for _, h := range a.Hosts {
		for _, path := range a.Paths {
			key := strings.ToLower(h) + " " + path
			prev, ok := routes[key]
			if !ok {
				routes[key] = name
				continue
			}
			if prev == name {
				continue
			}
			if c := clashes[prev]; c != nil {
				c.n++
				continue
			}
			clashes[prev] = &clash{host: h, path: path, n: 1}
			order = append(order, prev)
		}
	}
	for _, prev := range order {
		c := clashes[prev]
		more := ""
		if c.n > 1 {
			more = fmt.Sprintf(" (and %d more host and path pairs)", c.n-1)
		}
		errs.add(p, "host %s path %s is already claimed by app %s%s", c.host, c.path, prev, more)
	}
}

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// checkHost accepts a DNS name ("example.com"), a wildcard over one
// ("*.example.com"), an IPv4 literal ("192.0.2.1") or a bracketed IPv6 one
// ("[2001:db8::1]", as a Host header carries it); no port, no other
// wildcards. Names follow RFC 1035's limits (labels of 1..63 bytes, at most
// 253 in all) and may hold only letters, digits, '-' and '_': a control byte
// or space could never match a request and may split a log line or header.
func checkHost(h string) error {
	bad := func(why string, args ...any) error {
		return fmt.Errorf("%q is not a host name (want example.com, *.example.com or an IP, no port): %s",
			h, fmt.Sprintf(why, args...))
	}
	name, wildcard := strings.CutPrefix(h, "*.")
	if inner, ok := strings.CutPrefix(name, "["); ok && !wildcard {
		ip, err := netip.ParseAddr(strings.TrimSuffix(inner, "]"))
		if err != nil || !strings.HasSuffix(inner, "]") || !ip.Is6() || ip.Zone() != "" {
			return bad("not an IPv6 literal")
		}
		return nil
	}
	if name == "" {
		return bad("empty")
	}
	if len(name) > 253 {
		return bad("longer than 253 bytes")
	}
	for i := range len(name) {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c == '*':
			return bad("a wildcard is only a leading *.")
		case c == ':':
			return bad("a port, or an IPv6 address without [ ]")
		case c <= ' ' || c == 0x7f:
			return bad("control byte or space 0x%02x", c)
		default:
			return bad("byte %q", c)
		}
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return bad("empty label")
		case len(l) > 63:
			return bad("label longer than 63 bytes")
		case l[0] == '-' || l[len(l)-1] == '-':
			return bad("label %q starts or ends with '-'", l)
		}
	}
	// A name whose last label is all digits can only be an IPv4 address
	// (no top-level domain is numeric): 256.0.0.1 or 1.2.3 is a mistake.
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		if ip, err := netip.ParseAddr(name); err != nil || !ip.Is4() {
			return bad("not a valid IPv4 address")
		}
		if wildcard {
			return bad("a wildcard is for names, not addresses")
		}
	}
	return nil
}

func checkBackend(errs *Errors, path string, b Backend) {
	host, port, err := net.SplitHostPort(b.Addr)
	if err != nil || host == "" {
		errs.add(path, "%q is not host:port", b.Addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs.add(path, "port %q must be 1..65535", port)
	}
	within(errs, path+".weight", b.Weight, 1, 1000)
}

func validateBalance(errs *Errors, path string, b Balance) {
	if b.ImbalanceAlert < 1 || b.ImbalanceAlert > 1000 {
		errs.add(path+".imbalance_alert", "must be 1..1000 (got %v)", b.ImbalanceAlert)
	}
	switch b.Policy {
	case BalanceP2C, BalanceRoundRobin, BalanceWeighted:
		if b.Hash.Key != "" {
			errs.add(path+".hash", "is only for policy hash (policy is %s)", b.Policy)
		}
	case BalanceHash:
		if _, err := clientkey.Parse(b.Hash.Key); err != nil {
			errs.add(path+".hash.key", "%v", err)
		}
		if b.Hash.Load < 1 || b.Hash.Load > 100 {
			errs.add(path+".hash.load", "must be 1..100 (got %v)", b.Hash.Load)
		}
	default:
		errs.add(path+".policy", "must be p2c, round_robin, weighted or hash (got %q)", b.Policy)
	}
}

func checkClass(errs *Errors, path, class string) {
	switch class {
	case ClassCritical, ClassDefault, ClassSheddable:
	default:
		errs.add(path, "must be critical, default or sheddable (got %q)", class)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func validateRetry(errs *Errors, p string, r Retry) {
	seen := map[string]bool{}
	for i, on := range r.On {
		switch on {
		case RetryConnect, "502", "503", "504":
		default:
			errs.add(fmt.Sprintf("%s.on[%d]", p, i), "must be connect, 502, 503 or 504 (got %q)", on)
		}
		if seen[on] {
			errs.add(fmt.Sprintf("%s.on[%d]", p, i), "%s is listed twice", on)
		}
		seen[on] = true
	}
	within(errs, p+".attempts", r.Attempts, 1, MaxRetryAttempts)
	within(errs, p+".min_per_window", r.MinPerWindow, 0, 1000)
}
