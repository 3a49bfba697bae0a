package drill

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// NewH2Doer returns a doer that sends every request over HTTP/2 to
// target: TLS with ALPN h2 for https:// (verified by roots, nil for the
// system's, with serverName as the name), h2c with prior knowledge for
// http://. Go's client keeps one connection per address and opens more
// only when the server's stream limit is reached; a connection that gets
// a GOAWAY takes no new stream, and a request the server never processed
// (its stream above the GOAWAY's last) is sent again on a new one.
func NewH2Doer(target, serverName string, roots *x509.CertPool) *HTTPDoer {
	tr := &http.Transport{
		Proxy:              nil,
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableCompression: true,
		IdleConnTimeout:    30 * time.Second,
		Protocols:          new(http.Protocols),
	}
	if strings.HasPrefix(target, "https://") {
		tr.Protocols.SetHTTP2(true)
		tr.TLSClientConfig = &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"h2"}}
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &HTTPDoer{Client: &http.Client{Transport: tr, CheckRedirect: noRedirect}, Base: target}
}

// pemRoots reads the PEM certificates of path as a pool of roots; nil
// for an empty path (the system's roots). flag names it in errors.
func pemRoots(flag, path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, path)
	}
	return roots, nil
}
