package forward

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

func TestDialBudgetTake(t *testing.T) {
	b := newDialBudget(10, 3) // 100ms a token, 3 at once
	now := time.Unix(1000, 0)
	for i := range 3 {
		if d := b.take(now); d != 0 {
			t.Fatalf("token %d of the burst: wait %v", i, d)
		}
	}
	if d := b.take(now); d != 100*time.Millisecond {
		t.Fatalf("past the burst: wait %v, want 100ms", d)
	}
	if d := b.take(now.Add(100 * time.Millisecond)); d != 0 {
		t.Fatalf("a token later: wait %v", d)
	}
	if d := b.take(now.Add(100 * time.Millisecond)); d != 100*time.Millisecond {
		t.Fatalf("then none: wait %v", d)
	}
	// A dial that opened nothing gives its token back.
	b.refund()
	if d := b.take(now.Add(100 * time.Millisecond)); d != 0 {
		t.Fatalf("after a refund: wait %v", d)
	}
	// Idle long enough, the whole burst is back, and no more.
	later := now.Add(time.Hour)
	for range 3 {
		if d := b.take(later); d != 0 {
			t.Fatalf("after an hour: wait %v", d)
		}
	}
	if d := b.take(later); d == 0 {
		t.Fatal("more than the burst after an idle hour")
	}
}

// A dial waiting for the budget ends when a connection comes back (a
// pool's dial), or gives up at its deadline (an upgrade's own).
func TestDialBudgetAwait(t *testing.T) {
	b := newDialBudget(0.001, 1) // one token, then one each 1000 s
	if waited, err := b.await(time.Second, true); waited || err != nil {
		t.Fatalf("the first dial: waited %v, %v", waited, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.await(time.Hour, true)
		done <- err
	}()
	for b.waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b.gaveBack()
	if err := <-done; !errors.Is(err, errDialDeferred) {
		t.Fatalf("a pool's dial when a connection came back: %v, want errDialDeferred", err)
	}
	if _, err := b.await(10*time.Millisecond, false); !errors.Is(err, errDialBudget) || !backendTimedOut(err) {
		t.Fatalf("an own dial past its wait: %v, want errDialBudget, a 504", err)
	}
}

// A backend that drops every connection (a restart) with the pool busy:
// the next wave of requests redials at upstream.dial_rate, not all at once,
// and every request is served, on the connections that come back.
func TestDialBudgetBoundsARedialWave(t *testing.T) {
	const wave = 16
	var mu sync.Mutex
	conns := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns[c.RemoteAddr().String()] = true
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	u := config.Default().Upstream
	u.MaxConnsPerBackend = wave
	u.DialRate = config.Rate{Events: 20, Per: time.Second} // 50ms a dial past the burst
	hc, _, pool := newFastClient(strings.TrimPrefix(srv.URL, "http://"), u, nil, nil)
	run := func() {
		var wg sync.WaitGroup
		for range wave {
			wg.Go(func() {
				resp, err := fastDo(hc, http.MethodGet, "/")
				if err != nil {
					t.Error(err)
					return
				}
				drain(t, resp)
			})
		}
		wg.Wait()
	}
	burst := time.Now()
	run() // the burst: up to wave connections at once
	srv.CloseClientConnections()
	pool.close(false) // what levee finds on its next look anyway
	mu.Lock()
	// On a loaded machine a request of the burst may start after another
	// ended and take its connection: the burst's tokens it did not spend
	// are still there for the next wave.
	unspent := wave - len(conns)
	clear(conns)
	mu.Unlock()
	start := time.Now()
	run()
	elapsed := time.Since(start)
	mu.Lock()
	dials := len(conns)
	mu.Unlock()
	// The budget refills from the burst on: the time the first wave took
	// (longer on a loaded machine) is dials' worth too.
	if bound := unspent + 1 + int(time.Since(burst)/(50*time.Millisecond)); dials > bound {
		t.Errorf("%d dials in %v after the drop, %v after the burst (%d of its tokens unspent): the budget allows %d",
			dials, elapsed, time.Since(burst), unspent, bound)
	}
	t.Logf("%d requests after the drop, %d dials in %v", wave, dials, elapsed)
}
