package reply

import (
	"net/http/httptest"
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
