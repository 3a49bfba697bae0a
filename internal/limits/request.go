package limits

import (
	"net/http"

	"github.com/leveeproxy/levee/internal/clientkey"
	"github.com/leveeproxy/levee/internal/shape"
)

// HTTPRequest is a net/http request as the gate reads it: the proxy's
// net/http engine and the middleware both use it.
type HTTPRequest struct{ R *http.Request }

func (q HTTPRequest) Path() string { return q.R.URL.Path }

// Target is the request-target as sent; a request made in process (not
// read from a connection) has none, and its URL's stands for it.
func (q HTTPRequest) Target() string {
	if q.R.RequestURI != "" {
		return q.R.RequestURI
	}
	return q.R.URL.RequestURI()
}

// Headers counts Host too: net/http keeps it apart from the header map.
func (q HTTPRequest) Headers() (int, int) {
	count, size := shape.HeaderSize(q.R.Header)
	return count + 1, size + len("Host") + len(q.R.Host)
}

func (q HTTPRequest) ContentLength() int64 { return q.R.ContentLength }

func (q HTTPRequest) ClientKey(k clientkey.Source) string { return k.HTTP(q.R) }

// TopKey is who the request is for the top clients: the client key if it
// is a header the request has, else the peer's address.
func (q HTTPRequest) TopKey(k clientkey.Source) string {
	if k.IsHeader() {
		if v := k.HTTP(q.R); v != "" {
			return v
		}
	}
	return clientkey.PeerIP(q.R)
}

var _ Request = HTTPRequest{}
