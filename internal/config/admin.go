package config

import (
	"bytes"
	"fmt"
	"net"

	"go.yaml.in/yaml/v3"
)

// Admin is the admin listener: where it binds, who may change state
// through it, and whether it serves Go profiles.
type Admin struct {
	// Addr is host:port, as listen[].addr.
	Addr string `yaml:"addr"`
	// TokenFile names a file holding the bearer token that mutating
	// endpoints (POST /reload) require. Empty means no token: mutating
	// endpoints are then allowed only on a loopback Addr.
	TokenFile string `yaml:"token_file"`
	// Pprof serves /debug/pprof/; off by default, since a profile costs
	// CPU and shows the process's internals.
	Pprof bool `yaml:"pprof"`
}

// Token file bounds: a real token is a line of random text.
const (
	// MaxTokenBytes caps admin.token_file.
	MaxTokenBytes = 4 << 10
	// MinTokenBytes is the shortest token accepted, so a guessable word is refused.
	MinTokenBytes = 16
)

// decodeYAML accepts "host:port" (today's form) or {addr, token_file, pprof}.
func (a *Admin) decodeYAML(n *yaml.Node, path string, errs *Errors) {
	decodeShorthand(n, path, errs, a, &a.Addr)
}

// Token reads the token from TokenFile, bounded by MaxTokenBytes and trimmed
// of surrounding white space; "" and nil when TokenFile is empty. An error is
// a FieldError at admin.token_file. Validation calls it to prove the file
// holds a token, and the command at start, since only the start binds it.
func (a Admin) Token() (string, error) { return a.token(ownReader()) }

func (a Admin) token(rd reader) (string, error) {
	if a.TokenFile == "" {
		return "", nil
	}
	data, err := rd.read(a.TokenFile, MaxTokenBytes)
	if err != nil {
		return "", FieldError{Path: "admin.token_file", Msg: err.Error()}
	}
	tok := bytes.TrimSpace(data)
	if len(tok) < MinTokenBytes {
		return "", FieldError{Path: "admin.token_file", Msg: fmt.Sprintf("the token in %s is shorter than %d bytes "+
			"(empty or a guessable word); write a random one, e.g. `openssl rand -hex 32`", a.TokenFile, MinTokenBytes)}
	}
	return string(tok), nil
}

// IsLoopback reports whether addr's host is loopback only: localhost or an
// IP in 127.0.0.0/8 or ::1. An empty host, 0.0.0.0 or :: (every address) and
// any other IP are not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *Admin) validate(errs *Errors, rd reader) {
	n := len(*errs)
	checkListenAddr(errs, "admin.addr", a.Addr)
	if a.TokenFile == "" {
		// A bad address is one error, not two.
		if len(*errs) == n && !IsLoopback(a.Addr) {
			errs.add("admin.token_file", "required when admin.addr (%s) is beyond loopback: without a token anyone "+
				"who reaches it could reload the config; set admin.token_file, or bind admin.addr to 127.0.0.1", a.Addr)
		}
		return
	}
	if _, err := a.token(rd); err != nil {
		errs.add("admin.token_file", "%s", err.(FieldError).Msg)
	}
}
