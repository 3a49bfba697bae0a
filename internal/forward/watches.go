package forward

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// watches are the contexts of the requests in flight on the net/http
// engine, by request, for the exchange to find (HostClient.Do takes no
// context). Safe for concurrent use.
type watches struct {
	n atomic.Int64 // entries in m: none, and a lookup costs one load
	m sync.Map     // *fasthttp.Request → context.Context
}

func (w *watches) add(req *fasthttp.Request, ctx context.Context) {
	w.n.Add(1)
	w.m.Store(req, ctx)
}

func (w *watches) remove(req *fasthttp.Request) {
	w.m.Delete(req)
	w.n.Add(-1)
}

// of returns req's context, or nil.
func (w *watches) of(req *fasthttp.Request) context.Context {
	if w == nil || w.n.Load() == 0 {
		return nil
	}
	if v, ok := w.m.Load(req); ok {
		return v.(context.Context)
	}
	return nil
}
