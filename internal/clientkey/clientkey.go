// Package clientkey says who a request is for levee's per-client steps:
// the hash policy (balance.hash.key), client rate limits, fair share,
// priorities and the top clients (limits.client.key). One type serves
// every step so that they can never disagree about who a client is.
//
// It reads net/http requests only; the fasthttp engine's reader of the
// same Source is in package forward, so that the gate (internal/limits)
// and the admission library link no fasthttp.
package clientkey

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Kind is where a Source reads the key.
type Kind uint8

const (
	None   Kind = iota // reads nothing: the key is ""
	IP                 // the peer's address, without its port
	Header             // a request header
	Cookie             // a request cookie
)

// Source names where a request's client key is read: header:NAME,
// cookie:NAME or the peer's IP ("ip"). The zero value reads nothing.
type Source struct {
	kind Kind
	name string
}

// Parse parses a key source as the config writes it: "header:NAME",
// "cookie:NAME" or "ip".
func Parse(s string) (Source, error) {
	if s == "ip" {
		return Source{kind: IP}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok || (kind != "header" && kind != "cookie") || name == "" || strings.ContainsAny(name, " \t:") {
		return Source{}, fmt.Errorf("%q is not a key source (want header:NAME, cookie:NAME or ip)", s)
	}
	if kind == "header" {
		return Source{kind: Header, name: name}, nil
	}
	return Source{kind: Cookie, name: name}, nil
}

// New is Parse for a validated source; one the config would reject gives
// the zero Source.
func New(s string) Source {
	k, _ := Parse(s)
	return k
}

// Kind is where k reads the key.
func (k Source) Kind() Kind { return k.kind }

// IsHeader reports whether the key comes from a request header.
func (k Source) IsHeader() bool { return k.kind == Header }

// Name is the header or cookie name ("" for ip).
func (k Source) Name() string { return k.name }

// HTTP returns the key of a net/http request ("" when the header or cookie
// is absent).
func (k Source) HTTP(r *http.Request) string {
	switch k.kind {
	case Header:
		return r.Header.Get(k.name)
	case Cookie:
		if c, err := r.Cookie(k.name); err == nil {
			return c.Value
		}
	case IP:
		return PeerIP(r)
	}
	return ""
}

// PeerIP is the address of a net/http request's peer, without its port.
func PeerIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
