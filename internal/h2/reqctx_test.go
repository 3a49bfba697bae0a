package h2

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestParseOriginAsNetURL: where parseOrigin takes a :path, it gives the
// URL url.ParseRequestURI gives.
func TestParseOriginAsNetURL(t *testing.T) {
	for _, s := range []string{"/", "/a/b", "/a?", "/a??", "/a?b?", "/a?b=c&d", "/a?x y", "//x/y", "/a;b,c=d@e:f$g&h+i~j",
		"/%41", "/a b", "/a\tb", "/a?\x7f", "/é", "*", "", "a", "/a#b", "/a?b#c", "/[x]", "/a'b", "/a!b", "/(x)", "/a*b"} {
		checkParseOrigin(t, s)
	}
}

func checkParseOrigin(t *testing.T, s string) {
	t.Helper()
	var u url.URL
	if !parseOrigin(&u, s) {
		return
	}
	want, err := url.ParseRequestURI(s)
	if err != nil {
		t.Fatalf("parseOrigin(%q) took it; url.ParseRequestURI: %v", s, err)
	}
	if u != *want {
		t.Fatalf("parseOrigin(%q) = %#v; url.ParseRequestURI %#v", s, u, *want)
	}
}

func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"/", "/a?b", "/a?", "/%41?x"} {
		f.Add(s)
	}
	f.Fuzz(checkParseOrigin)
}

// TestRequestContext: a request's context carries the connection's
// values, and ends when its handler returns; one that a handler keeps
// past its return stays ended while the stream serves the next request.
func TestRequestContext(t *testing.T) {
	kept := make(chan context.Context, 2)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if _, ok := ctx.Value(http.ServerContextKey).(*http.Server); !ok {
			t.Error("no http.ServerContextKey")
		}
		if ctx.Err() != nil {
			t.Errorf("context ended in the handler: %v", ctx.Err())
		}
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { close(fired) })
		if !stop() {
			t.Error("AfterFunc's stop did not stop it")
		}
		kept <- ctx
	})})
	rc := dialRaw(t, addr)
	for id := uint32(1); id <= 3; id += 2 {
		rc.get(id, "/", true)
		if status, _ := rc.response(id, nil); status != "200" {
			t.Fatalf("status %s", status)
		}
	}
	first, second := <-kept, <-kept
	if first == second {
		t.Fatal("two requests share a context")
	}
	for _, ctx := range []context.Context{first, second} {
		select {
		case <-ctx.Done():
		case <-time.After(guard):
			t.Fatal("a request's context did not end after its handler returned")
		}
		if ctx.Err() != context.Canceled || context.Cause(ctx) != context.Canceled {
			t.Fatalf("Err %v, Cause %v; want context.Canceled", ctx.Err(), context.Cause(ctx))
		}
	}
}

// TestReqContextWatch: Watch runs its function once at the end unless
// Unwatch stops it first, one watch at a time; AfterFunc's run as
// context.AfterFunc's do.
func TestReqContextWatch(t *testing.T) {
	c := &reqContext{parent: context.Background()}
	ran := make(chan string, 4)
	if !c.Watch(func() { ran <- "stopped" }) || c.Watch(func() {}) {
		t.Fatal("Watch: want the first set and the second refused")
	}
	if !c.Unwatch() || c.Unwatch() {
		t.Fatal("Unwatch: want true once")
	}
	c.Watch(func() { ran <- "watch" })
	stop := context.AfterFunc(c, func() { ran <- "after" })
	context.AfterFunc(c, func() { ran <- "stopped" })()
	c.cancel()
	c.cancel()
	got := map[string]bool{<-ran: true, <-ran: true}
	if !got["watch"] || !got["after"] {
		t.Fatalf("ran %v, want watch and after", got)
	}
	if c.Unwatch() || stop() {
		t.Fatal("stopped after it ran")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err %v", c.Err())
	}
	<-c.Done()
	c.Watch(func() { ran <- "late" }) // an ended context runs it at once
	if s := <-ran; s != "late" {
		t.Fatalf("ran %s", s)
	}
}

// TestConnContextEndEndsRequests: a ConnContext's context that ends ends
// the contexts of the connection's requests, those running and those
// that come after, as a child of it would end.
func TestConnContextEndEndsRequests(t *testing.T) {
	connCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 2)
	addr := serve(t, &Server{
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return &connContext{Context: ctx, end: connCtx}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-time.After(guard):
				t.Error("the request's context did not end with the connection's")
			}
		}),
	})
	rc := dialRaw(t, addr)
	rc.get(1, "/", true)
	<-started
	cancel()
	if status, _ := rc.response(1, nil); status != "200" {
		t.Fatalf("status %s", status)
	}
	rc.get(3, "/", true) // its context has ended before it begins
	if status, _ := rc.response(3, nil); status != "200" {
		t.Fatalf("status %s", status)
	}
}

// connContext is ctx's values that end when end does.
type connContext struct {
	context.Context
	end context.Context
}

func (c *connContext) Done() <-chan struct{} { return c.end.Done() }
func (c *connContext) Err() error            { return c.end.Err() }

// TestConnEndEndsAnsweredRequests: the connection's end ends the context
// of a handler still running after its stream has left the connection
// (a HEAD answered and flushed, both ends closed), as it ends those of
// the streams still open.
func TestConnEndEndsAnsweredRequests(t *testing.T) {
	ended := make(chan bool, 1)
	addr := serve(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		w.(http.Flusher).Flush() // the stream's last frame: it leaves c.streams
		select {
		case <-r.Context().Done():
			ended <- true
		case <-time.After(guard):
			ended <- false
		}
	})})
	rc := dialRaw(t, addr)
	rc.hbuf.Reset()
	for _, f := range [][2]string{{":method", "HEAD"}, {":scheme", "http"}, {":authority", "test"}, {":path", "/"}} {
		rc.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	if status, _ := rc.response(1, nil); status != "204" {
		t.Fatalf("status %s", status)
	}
	rc.c.Close()
	if !<-ended {
		t.Fatal("the handler's context did not end with its connection")
	}
}
