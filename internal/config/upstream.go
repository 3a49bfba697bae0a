package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/textproto"
	"reflect"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"
)

// Protocol is what levee speaks to an app's backends
// (apps.NAME.upstream.protocol), written http1, h2c or h2. A byte, not a
// string: every app, stored ones too, holds one.
type Protocol uint8

// The protocols.
const (
	// ProtocolHTTP1 is HTTP/1.1 over TCP (the default).
	ProtocolHTTP1 Protocol = iota
	// ProtocolH2C is HTTP/2 over TCP with prior knowledge (no TLS).
	ProtocolH2C
	// ProtocolH2 is HTTP/2 over TLS, negotiated by ALPN.
	ProtocolH2
)

var protocolNames = [...]string{ProtocolHTTP1: "http1", ProtocolH2C: "h2c", ProtocolH2: "h2"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

func (p *Protocol) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	if n.Kind == yaml.ScalarNode {
		for i, name := range protocolNames {
			if n.Value == name {
				*p = Protocol(i)
				return
			}
		}
	}
	errs.add(path, "must be http1, h2c or h2 (got %q)", n.Value)
}

// MarshalYAML writes the protocol's name (levee check's resolved config).
func (p Protocol) MarshalYAML() (any, error) { return p.String(), nil }

// Bounds of apps.NAME.upstream.deadline.timeout.
const (
	DefaultAppTimeout = 30 * time.Second
	MaxAppTimeout     = 24 * time.Hour
)

// AppUpstream is how levee talks to one app's backends. The connection
// pool's settings (connections per backend, dial rate, timeouts) are the
// global upstream section's, shared by every app. The zero value is every
// default: HTTP/1.1, and the default deadline.
type AppUpstream struct {
	// Protocol is http1, h2c or h2 (h2 is HTTP/2 over TLS to the backend).
	Protocol Protocol `yaml:"protocol"`
	// TLS configures the TLS client of protocol h2; nil verifies the
	// backend against the system roots for its host.
	TLS *UpstreamTLS `yaml:"tls"`
	// Deadline is the deadline levee hands on; nil: the defaults
	// (Deadlines).
	Deadline *UpstreamDeadline `yaml:"deadline"`
}

// UpstreamDeadline is the time a forwarded request is given, which the
// backend learns as Levee-Deadline (and grpc-timeout for gRPC).
type UpstreamDeadline struct {
	// Timeout is the app's response timeout: the most time a request is
	// given, less what the client's own deadline and the queue took.
	Timeout Duration `yaml:"timeout"`
	// Header names a request header in which a client gives its own
	// deadline, in milliseconds from now (as Levee-Deadline); "" reads
	// only gRPC's grpc-timeout.
	Header string `yaml:"header"`

	canonical string // Header in its canonical form, set by validation
}

// CanonicalHeader is Header as Go's HTTP/2 server keys it (and as the
// HTTP/1.1 engine compares it, without regard to case): made once, by
// validation, rather than per request.
func (d *UpstreamDeadline) CanonicalHeader() string { return d.canonical }

// DefaultUpstreamDeadline is apps.NAME.upstream.deadline's defaults.
func DefaultUpstreamDeadline() UpstreamDeadline {
	return UpstreamDeadline{Timeout: Duration(DefaultAppTimeout)}
}

// decodeYAML starts a deadline written in the file from the defaults.
func (d *UpstreamDeadline) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	*d = DefaultUpstreamDeadline()
	decodeStruct(n, reflect.ValueOf(d).Elem(), path, errs)
}

// Deadlines is the app's deadline settings, the defaults when none are
// written.
func (u *AppUpstream) Deadlines() UpstreamDeadline {
	if u.Deadline == nil {
		return DefaultUpstreamDeadline()
	}
	return *u.Deadline
}

// Upstreams is the app's upstream settings, the defaults when none are
// written.
func (a *App) Upstreams() AppUpstream {
	if a.Upstream == nil {
		return AppUpstream{}
	}
	return *a.Upstream
}

// HTTP2 reports whether the app's backends speak HTTP/2.
func (u *AppUpstream) HTTP2() bool { return u.Protocol == ProtocolH2C || u.Protocol == ProtocolH2 }

// Leg is the protocol to an app's backends and its TLS client, as far as
// they make two legs differ: the files' names and, through the digest
// the copy keeps (Sum), their contents, so a reload after a certificate's
// rotation dials with the new one. A comparable key (the pools', the
// health checkers').
type Leg struct {
	Protocol Protocol
	TLS      UpstreamTLS // zero unless Protocol is h2 with a tls mapping
}

// Leg is u's protocol and TLS client.
func (u *AppUpstream) Leg() Leg {
	k := Leg{Protocol: u.Protocol}
	if t := u.TLS; t != nil && k.Protocol == ProtocolH2 {
		k.TLS = UpstreamTLS{CA: t.CA, ServerName: t.ServerName, Cert: t.Cert, Key: t.Key,
			InsecureSkipVerify: t.InsecureSkipVerify, sum: t.sum}
	}
	return k
}

// UpstreamTLS is the TLS client toward an app's backends (protocol h2).
// Verification is on unless InsecureSkipVerify says otherwise.
type UpstreamTLS struct {
	// CA is a PEM file of the roots a backend's certificate must chain to;
	// "" is the system's roots.
	CA string `yaml:"ca"`
	// ServerName is sent as SNI and verified against the backend's
	// certificate; "" is the backend address's host.
	ServerName string `yaml:"server_name"`
	// Cert and Key are PEM files of a client certificate (both or neither).
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// InsecureSkipVerify accepts any certificate: for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`

	// What validation loaded (see Config), and a digest of it (see Sum).
	roots *x509.CertPool
	pair  *tls.Certificate
	sum   [sha256.Size]byte
}

// Sum is a digest of the files' contents as validation loaded them: the
// CA's PEM and the client certificate's chain. A reload that finds the
// same file names with new contents (a rotated certificate) gets another
// Sum, so the pools keyed by it are made again with the new files.
func (t *UpstreamTLS) Sum() [sha256.Size]byte { return t.sum }

// Config returns the TLS client config of t as validation loaded it, for
// a backend at host, with ALPN h2. A nil t verifies against the system
// roots.
func (t *UpstreamTLS) Config(host string) *tls.Config {
	c := &tls.Config{ServerName: host, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	if t == nil {
		return c
	}
	if t.ServerName != "" {
		c.ServerName = t.ServerName
	}
	c.RootCAs = t.roots
	if t.pair != nil {
		c.Certificates = []tls.Certificate{*t.pair}
	}
	c.InsecureSkipVerify = t.InsecureSkipVerify //nolint:gosec // the operator's explicit choice, documented as tests only
	return c
}

// validateAppUpstream checks apps.NAME.upstream (p) and loads its TLS
// files through rd (nil: files are not allowed, as in a stored app).
func validateAppUpstream(errs *Errors, rd *reader, p string, u *AppUpstream) {
	if d := u.Deadline; d != nil {
		if d.Timeout <= 0 || d.Timeout.D() > MaxAppTimeout {
			errs.add(p+".deadline.timeout", "must be > 0 and ≤ 24h (got %s)", d.Timeout)
		}
		if h := d.Header; h != "" && !httpguts.ValidHeaderFieldName(h) {
			errs.add(p+".deadline.header", "%q is not a header name", h)
		} else {
			d.canonical = textproto.CanonicalMIMEHeaderKey(h)
		}
	}
	if u.TLS == nil {
		return
	}
	if u.Protocol != ProtocolH2 {
		errs.add(p+".tls", "only with protocol h2 (HTTP/2 over TLS); got protocol %s", u.Protocol)
		return
	}
	u.TLS.load(errs, rd, p+".tls")
}

// load reads t's files through rd, adding problems to errs under p.
func (t *UpstreamTLS) load(errs *Errors, rd *reader, p string) {
	files := t.CA != "" || t.Cert != "" || t.Key != ""
	if files && rd == nil {
		errs.add(p, "a stored app names no files: its backends' TLS can set server_name only")
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		errs.add(p, "both cert and key are required for a client certificate (or neither)")
		return
	}
	h := sha256.New()
	if t.CA != "" {
		pem, err := rd.read(t.CA, MaxPEMBytes)
		if err != nil {
			errs.add(p+".ca", "%v", err)
			return
		}
		t.roots = x509.NewCertPool()
		if !t.roots.AppendCertsFromPEM(pem) {
			errs.add(p+".ca", "%s holds no PEM certificate", t.CA)
			return
		}
		h.Write(pem)
	}
	if t.Cert != "" {
		pair, err := loadCertificate(*rd, p, &TLS{Cert: t.Cert, Key: t.Key})
		if err != nil {
			var fe FieldError
			if errors.As(err, &fe) {
				*errs = append(*errs, fe)
			}
			return
		}
		t.pair = &pair
		for _, der := range pair.Certificate {
			h.Write(der)
		}
	}
	h.Sum(t.sum[:0])
}
