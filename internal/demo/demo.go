// Package demo runs sample backends on loopback and the config that puts
// levee in front of them, for `levee demo` and for tests.
package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Backend is one sample backend: it answers with who it is, and has
// endpoints to make it slow (/slow?ms=N) or stream (/stream?chunks=N).
type Backend struct {
	Name string
	Addr string // host:port it listens on
	srv  *http.Server
	ln   net.Listener
}

// StartBackend listens on a free loopback port and serves until ctx is
// done or Close is called.
func StartBackend(name string) (*Backend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	b := &Backend{Name: name, Addr: ln.Addr().String(), ln: ln}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go b.srv.Serve(ln) // ends when Close shuts the server
	return b, nil
}

// Close stops the backend at once.
func (b *Backend) Close() error { return b.srv.Close() }

const (
	maxSlow = 30 * time.Second
	maxBody = 64 << 20
)

func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body as a real app would before answering: an answer sent
	// before the body is read would cut levee's body and batch checks short.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBody))
	switch r.URL.Path {
	case "/slow":
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		d := min(time.Duration(max(ms, 0))*time.Millisecond, maxSlow)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	case "/stream":
		n, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
		n = min(max(n, 1), 100)
		w.Header().Set("Content-Type", "text/plain")
		for i := range n {
			fmt.Fprintf(w, "chunk %d from %s\n", i, b.Name)
			http.NewResponseController(w).Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"backend":         b.Name,
		"host":            r.Host,
		"path":            r.URL.Path,
		"x_forwarded_for": r.Header.Get("X-Forwarded-For"),
	})
}

// DrillBackendPort is the first of DrillBackends loopback ports the demo's
// "drill" app sends to: `levee drill distribution --backend-port` starts
// its backends there.
const (
	DrillBackendPort = 19101
	DrillBackends    = 4
)

func drillAddrs() string {
	s := make([]string, DrillBackends)
	for i := range s {
		s[i] = fmt.Sprintf("127.0.0.1:%d", DrillBackendPort+i)
	}
	return strings.Join(s, ", ")
}

// Demo is the set of sample backends behind levee's demo config.
type Demo struct {
	Apps     map[string][]*Backend // app name → its backends
	backends []*Backend
	once     sync.Once
}

// AppNames are the demo's apps, each reachable as NAME.localhost.
var AppNames = []string{"photos", "api"}

// Start starts three sample backends for each demo app.
func Start() (*Demo, error) {
	d := &Demo{Apps: map[string][]*Backend{}}
	for _, app := range AppNames {
		for i := 1; i <= 3; i++ {
			b, err := StartBackend(fmt.Sprintf("%s-%d", app, i))
			if err != nil {
				d.Close()
				return nil, err
			}
			d.Apps[app] = append(d.Apps[app], b)
			d.backends = append(d.backends, b)
		}
	}
	return d, nil
}

// Close stops every backend.
func (d *Demo) Close() error {
	var errs []error
	d.once.Do(func() {
		for _, b := range d.backends {
			errs = append(errs, b.Close())
		}
	})
	return errors.Join(errs...)
}

// Config returns the demo's YAML config for levee listening on listen with
// its admin listener on admin. The api app has small limits, so a burst of
// slow requests shows levee's rejections.
func (d *Demo) Config(listen, admin string) []byte {
	addrs := func(app string) string {
		var s []string
		for _, b := range d.Apps[app] {
			s = append(s, b.Addr)
		}
		return strings.Join(s, ", ")
	}
	return fmt.Appendf(nil, `# levee demo: two apps, three sample backends each, on loopback.
listen: %s
admin: %s
apps:
  photos:
    hosts: [photos.localhost, "*.photos.localhost"]
    backends: [%s]
  api:
    hosts: [api.localhost]
    backends: [%s]
    limits:
      concurrency: 8          # at most 8 requests in flight to the api backends
      queue: {max_wait: 100ms, max_len: 8}
      body: 1MB
  # For levee drill (docs/drills.md): a tenant with an advertised limit, on
  # the api backends, for the tenant-limit and batch-storm drills...
  tenant:
    hosts: [tenant.localhost]
    backends: [%s]
    limits:
      rate: 100/s
      batch: {json_field: uris, max: 1000}
  # ...and the ports where levee drill distribution --backend-port %d starts
  # its own backends; until then this app answers 502.
  drill:
    hosts: [drill.localhost]
    backends: [%s]
`, listen, admin, addrs("photos"), addrs("api"), addrs("api"), DrillBackendPort, drillAddrs())
}
