package admission_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/admission"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// Levee-Deadline puts its deadline on the request's context: the handler
// sees it, and a request whose deadline passes while it queues is refused
// (504, deadline) and never reaches the handler, though the queue would
// have let it wait longer.
func TestWrapTakesLeveeDeadline(t *testing.T) {
	g := mustGate(t, "concurrency: 1\nqueue: {max_len: 4, max_wait: 30s}")
	release := make(chan struct{})
	var handled atomic.Int64
	var left atomic.Int64
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		if dl, ok := r.Context().Deadline(); ok {
			left.Store(int64(time.Until(dl)))
		}
		if r.URL.Path == "/hold" {
			<-release
		}
	}))
	serve := func(path, ms string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if ms != "" {
			r.Header.Set("Levee-Deadline", ms)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	serve("/", "2000")
	if d := time.Duration(left.Load()); d <= 0 || d > 2*time.Second {
		t.Fatalf("the handler's deadline is %v away, want (0, 2s]", d)
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		serve("/hold", "")
	}()
	leaktest.WaitFor(t, 10*time.Second, "the slot held", func() bool { return handled.Load() == 2 })
	w := serve("/", "50")
	close(release)
	<-held
	if w.Code != http.StatusGatewayTimeout || w.Header().Get("Levee-Reject") != "deadline" || handled.Load() != 2 {
		t.Fatalf("queued past its deadline: %d %q, %d handled; want 504 deadline, the handler never called",
			w.Code, w.Header().Get("Levee-Reject"), handled.Load())
	}
}

// passedDeadline is a context whose deadline has passed though its timer
// has not fired: the window in which a task could still be started.
type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Unix(1, 0), true }

// A task whose request's deadline has passed is never started, even with
// a slot free; the group fails with the deadline.
func TestBudgetStartsNoTaskPastItsDeadline(t *testing.T) {
	b := admission.NewBudget(4)
	g := b.Group(passedDeadline{context.Background()}, "")
	var ran atomic.Int64
	for range 3 {
		g.Go(func(context.Context) error { ran.Add(1); return nil })
	}
	if err := g.Wait(); !errors.Is(err, context.DeadlineExceeded) || ran.Load() != 0 {
		t.Fatalf("Wait = %v with %d tasks run; want the deadline, none run", err, ran.Load())
	}
}
