package reply

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{"application/grpc": true, "application/grpc+proto": true, "Application/GRPC;x=1": true,
		"application/grpc-web": false, "application/grpcx": false, "application/json": false, "": false} {
		if got := IsGRPC(ct); got != want {
			t.Errorf("IsGRPC(%q) = %v, want %v", ct, got, want)
		}
	}
}

// A gRPC refusal is a trailers-only 200: the status, the message naming
// the limit, the reason as metadata, the pushback of Retry-After's figure.
func TestGRPCReply(t *testing.T) {
	w := httptest.NewRecorder()
	NoBackendReply.GRPC(w, 1500*time.Millisecond)
	h := w.Header()
	if w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") != "14" ||
		h.Get("Grpc-Message") != "levee: rejected: no healthy backend" || h.Get(Reject) != NoBackend ||
		h.Get("Retry-After") != "2" || h.Get("Grpc-Retry-Pushback-Ms") != "1500" {
		t.Fatalf("%d %q %v", w.Code, w.Body, h)
	}
	if got := grpcMessage("50% über\n"); got != "50%25 %C3%BCber%0A" {
		t.Fatalf("grpcMessage = %q", got)
	}
}

// Every row of the table answers a gRPC call: a trailers-only 200 whose
// grpc-status follows the row (RESOURCE_EXHAUSTED for a limit on the
// request's own rate, shape or size; UNAVAILABLE for a 502, 503 or 504),
// whose grpc-message says the body, with the reason kept in the row's
// header and Retry-After's figure as grpc-retry-pushback-ms. A new row
// is covered here without a line more (the server's test maps each
// reason it names to the status a client must see).
func TestGRPCForEveryRow(t *testing.T) {
	for _, row := range rows {
		rep := For(row.Reason)
		w := httptest.NewRecorder()
		rep.GRPC(w, 1500*time.Millisecond)
		h := w.Header()
		code, _ := strconv.Atoi(h.Get("Grpc-Status"))
		switch {
		case w.Code != 200 || w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc":
			t.Errorf("%s: %d, %d body bytes, %q; want a trailers-only 200", row.Reason, w.Code, w.Body.Len(), h.Get("Content-Type"))
		case code != rep.GRPCCode():
			t.Errorf("%s: grpc-status %d, want %d", row.Reason, code, rep.GRPCCode())
		case rep.Header == Reject && rep.Status < 500 && code != GRPCResourceExhausted:
			t.Errorf("%s: a limit of the request's own (%d) is %d, want RESOURCE_EXHAUSTED", row.Reason, rep.Status, code)
		case (rep.Status == 502 || rep.Status == 503 || rep.Status == 504) && row.Reason != Deadline && code != GRPCUnavailable:
			t.Errorf("%s: a %d is %d, want UNAVAILABLE", row.Reason, rep.Status, code)
		case !strings.Contains(h.Get("Grpc-Message"), strings.TrimSpace(strings.TrimPrefix(rep.Body, "levee: "))):
			t.Errorf("%s: grpc-message %q does not say %q", row.Reason, h.Get("Grpc-Message"), rep.Body)
		case h.Get(rep.Header) != row.Reason:
			t.Errorf("%s: %s = %q", row.Reason, rep.Header, h.Get(rep.Header))
		case h.Get("Retry-After") != "2" || h.Get("Grpc-Retry-Pushback-Ms") != "1500":
			t.Errorf("%s: Retry-After %q, pushback %q; want 2 and 1500, one figure", row.Reason, h.Get("Retry-After"), h.Get("Grpc-Retry-Pushback-Ms"))
		}
	}
}
