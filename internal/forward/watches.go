package forward

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// watches are the contexts of the requests in flight on the net/http
// engine, by request, for the exchange to find (HostClient.Do takes no
// context). Safe for concurrent use. A map under a lock rather than a
// sync.Map, whose every Store allocates an entry: a request adds and
// removes its key, and the map's slots are reused.
type watches struct {
	n  atomic.Int64 // entries in m: none, and a lookup costs one load
	mu sync.Mutex
	m  map[*fasthttp.Request]context.Context
}

func (w *watches) add(req *fasthttp.Request, ctx context.Context) {
	w.mu.Lock()
	if w.m == nil {
		w.m = map[*fasthttp.Request]context.Context{}
	}
	w.m[req] = ctx
	w.mu.Unlock()
	w.n.Add(1)
}

func (w *watches) remove(req *fasthttp.Request) {
	w.mu.Lock()
	delete(w.m, req)
	w.mu.Unlock()
	w.n.Add(-1)
}

// of returns req's context, or nil.
func (w *watches) of(req *fasthttp.Request) context.Context {
	if w == nil || w.n.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[req]
}
