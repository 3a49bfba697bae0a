package drill

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http2"
)

// NewH2Doer returns a doer that sends every request over HTTP/2 to
// target: TLS with ALPN h2 for https:// (verified by roots, nil for the
// system's, with serverName as the name), h2c with prior knowledge for
// http://. Go's client keeps one connection per address and opens more
// only when the server's stream limit is reached; a connection that gets
// a GOAWAY takes no new stream, and a request the server never processed
// (its stream above the GOAWAY's last) is sent again on a new one.
func NewH2Doer(target, serverName string, roots *x509.CertPool) *HTTPDoer {
	return newH2Doer(target, serverName, roots, nil)
}

// newH2Doer is NewH2Doer with every connection watched by w (nil: none).
// It is x/net's HTTP/2 client, whose dialer may return a connection that
// wraps the TLS one (net/http's speaks HTTP/2 only on a *tls.Conn).
func newH2Doer(target, serverName string, roots *x509.CertPool, w *h2Watch) *HTTPDoer {
	tlsConf := &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"h2"}}
	plain := !strings.HasPrefix(target, "https://")
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http2.Transport{
		AllowHTTP:          plain,
		DisableCompression: true,
		IdleConnTimeout:    30 * time.Second,
		TLSClientConfig:    tlsConf,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if !plain {
				tc := tls.Client(c, tlsConf)
				if err := tc.HandshakeContext(ctx); err != nil {
					c.Close()
					return nil, err
				}
				if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
					tc.Close()
					return nil, fmt.Errorf("drill: %s negotiated %q, not h2", addr, p)
				}
				c = tc
			}
			if w != nil {
				c = w.wrap(c)
			}
			return c, nil
		},
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
