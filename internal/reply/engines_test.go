package reply_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/reply/fastreply"
)

// Every reply in the table is written alike by both engines: status, the
// reason header, the body, Retry-After and Connection: close.
func TestRepliesAreAlikeOnBothEngines(t *testing.T) {
	if len(reply.Reasons()) < 30 {
		t.Fatalf("%d reasons in the table; some of its rows are missing", len(reply.Reasons()))
	}
	for _, reason := range reply.Reasons() {
		r := reply.For(reason)
		for _, hint := range []time.Duration{0, 1500 * time.Millisecond} {
			var ctx fasthttp.RequestCtx
			fastreply.Write(&ctx, r, hint)
			w := httptest.NewRecorder()
			r.HTTP(w, hint)
			fh := &ctx.Response.Header
			if ctx.Response.StatusCode() != r.Status || w.Code != r.Status {
				t.Errorf("%s: status %d (fasthttp) %d (net/http), want %d", reason, ctx.Response.StatusCode(), w.Code, r.Status)
			}
			if string(fh.Peek(r.Header)) != reason || w.Header().Get(r.Header) != reason {
				t.Errorf("%s: %s %q / %q", reason, r.Header, fh.Peek(r.Header), w.Header().Get(r.Header))
			}
			if string(ctx.Response.Body()) != r.Body || w.Body.String() != r.Body {
				t.Errorf("%s: body %q / %q, want %q", reason, ctx.Response.Body(), w.Body.String(), r.Body)
			}
			want := ""
			if s := r.RetryAfterSeconds(hint); s > 0 {
				want = strconv.FormatInt(s, 10)
			}
			if string(fh.Peek("Retry-After")) != want || w.Header().Get("Retry-After") != want {
				t.Errorf("%s hint %v: Retry-After %q / %q, want %q", reason, hint, fh.Peek("Retry-After"), w.Header().Get("Retry-After"), want)
			}
			if fh.ConnectionClose() != r.Close || (w.Header().Get("Connection") == "close") != r.Close {
				t.Errorf("%s: close %v / %q, want %v", reason, fh.ConnectionClose(), w.Header().Get("Connection"), r.Close)
			}
		}
	}
}
