package forward

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// idleConns and openConns read the pool's own books, for tests.
func (p *h1Pool) idleConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *h1Pool) openConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// pipePool is a pool of max connections over net.Pipe, whose dials fail
// while fail is set; open counts the connections open now, most the most
// open at once.
type pipePool struct {
	*h1Pool
	stats      PoolStats
	fail       atomic.Bool
	open, most atomic.Int32
	dials      atomic.Int32
}

type countedPipe struct {
	net.Conn
	pp   *pipePool
	once sync.Once
}

func (c *countedPipe) Close() error {
	c.once.Do(func() { c.pp.open.Add(-1) })
	return c.Conn.Close()
}

func newPipePool(max int, wait, idleFor time.Duration) *pipePool {
	pp := &pipePool{}
	budget := newDialBudget(1e9, max)
	pp.h1Pool = newH1Pool(func() (*backendConn, error) {
		if pp.fail.Load() {
			return nil, errors.New("refused")
		}
		pp.dials.Add(1)
		a, b := net.Pipe()
		b.Close()
		if n := pp.open.Add(1); n > pp.most.Load() {
			pp.most.Store(n)
		}
		pp.stats.open.Add(1)
		return &backendConn{Conn: &countedPipe{Conn: a, pp: pp}, stats: &pp.stats, budget: budget}, nil
	}, &pp.stats, max, wait, idleFor)
	return pp
}

// waitForWaiter waits until one request waits at p.
func waitForWaiter(t *testing.T, p *h1Pool) {
	t.Helper()
	leaktest.WaitFor(t, 10*time.Second, "a waiter", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters) == 1
	})
}

// takeLater takes from p on a goroutine of its own, into got.
func takeLater(t *testing.T, p *h1Pool, got chan<- *backendConn) {
	go func() {
		c, err := p.take()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
}

func mustTake(t *testing.T, p *h1Pool) *backendConn {
	t.Helper()
	c, err := p.take()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The most recently given back is taken first (LIFO), and the idle count
// follows the connections in and out.
func TestH1PoolReusesTheMostRecent(t *testing.T) {
	pp := newPipePool(3, time.Second, time.Minute)
	a, b, c := mustTake(t, pp.h1Pool), mustTake(t, pp.h1Pool), mustTake(t, pp.h1Pool)
	for _, x := range []*backendConn{a, b, c} {
		pp.put(x)
	}
	if n := pp.stats.idle.Load(); n != 3 || pp.idleConns() != 3 {
		t.Fatalf("idle %d (pool %d), want 3", n, pp.idleConns())
	}
	if got := mustTake(t, pp.h1Pool); got != c {
		t.Fatal("took an older connection than the last given back")
	}
	if got := mustTake(t, pp.h1Pool); got != b {
		t.Fatal("took the oldest connection before a younger one")
	}
	if n := pp.stats.idle.Load(); n != 1 || pp.dials.Load() != 3 {
		t.Fatalf("idle %d, dials %d; want 1 and 3", n, pp.dials.Load())
	}
}

// At max, a request waits for a connection, up to the wait: it gets one
// given back (the same, not a new one), a place freed by a close (it dials
// then), or fasthttp.ErrNoFreeConns.
func TestH1PoolWaitsAtMax(t *testing.T) {
	pp := newPipePool(1, 50*time.Millisecond, time.Minute)
	c := mustTake(t, pp.h1Pool)
	if _, err := pp.take(); !errors.Is(err, fasthttp.ErrNoFreeConns) {
		t.Fatalf("past max, after the wait: %v, want ErrNoFreeConns", err)
	}

	pp.wait = 10 * time.Second
	got := make(chan *backendConn)
	takeLater(t, pp.h1Pool, got)
	waitForWaiter(t, pp.h1Pool)
	pp.put(c)
	if w := <-got; w != c {
		t.Fatal("the waiter got another connection than the one given back")
	}
	if n := pp.stats.idle.Load(); n != 0 {
		t.Fatalf("a connection handed to a waiter counted idle (%d)", n)
	}

	takeLater(t, pp.h1Pool, got)
	waitForWaiter(t, pp.h1Pool)
	pp.closeConn(c)
	if w := <-got; w == c || pp.dials.Load() != 2 {
		t.Fatalf("after a close the waiter got %p (closed %p), %d dials; want a new one, 2 dials", w, c, pp.dials.Load())
	}
	if most := pp.most.Load(); most != 1 {
		t.Fatalf("%d connections open at once, max 1", most)
	}
}

// A dial that fails gives its place back.
func TestH1PoolFailedDialFreesItsPlace(t *testing.T) {
	pp := newPipePool(1, 0, time.Minute)
	pp.fail.Store(true)
	if _, err := pp.take(); err == nil {
		t.Fatal("a failed dial gave a connection")
	}
	if n := pp.openConns(); n != 0 {
		t.Fatalf("%d places taken after a failed dial, want 0", n)
	}
	pp.fail.Store(false)
	mustTake(t, pp.h1Pool)
}

// Idle connections close after idleFor, oldest first, and the place they
// held is free again.
func TestH1PoolClosesIdleConnections(t *testing.T) {
	pp := newPipePool(4, time.Second, 30*time.Millisecond)
	a, b := mustTake(t, pp.h1Pool), mustTake(t, pp.h1Pool)
	pp.put(a)
	pp.put(b)
	leaktest.WaitFor(t, 10*time.Second, "the idle connections to close", func() bool {
		return pp.open.Load() == 0
	})
	if n, idle, counted := pp.openConns(), pp.idleConns(), pp.stats.idle.Load(); n != 0 || idle != 0 || counted != 0 {
		t.Fatalf("after idle_timeout: %d places, %d idle (%d counted); want none", n, idle, counted)
	}
	// The reaper starts again for the next idle connection.
	pp.put(mustTake(t, pp.h1Pool))
	leaktest.WaitFor(t, 10*time.Second, "the next idle connection to close", func() bool {
		return pp.open.Load() == 0
	})
}

// A retired pool (its last app gone) closes its idle connections at once
// and those in use as they come back: nothing is left open for no one.
func TestH1PoolRetiredClosesWhatComesBack(t *testing.T) {
	pp := newPipePool(4, time.Second, time.Minute)
	busy, idle := mustTake(t, pp.h1Pool), mustTake(t, pp.h1Pool)
	pp.put(idle)
	pp.close(true)
	if n := pp.open.Load(); n != 1 {
		t.Fatalf("%d open after retiring, want the 1 in use", n)
	}
	pp.put(busy)
	if n, places, counted := pp.open.Load(), pp.openConns(), pp.stats.idle.Load(); n != 0 || places != 0 || counted != 0 {
		t.Fatalf("after the last came back: %d open, %d places, %d counted idle; want none", n, places, counted)
	}
}

// Many requests taking, giving back and closing at once never open more
// than max connections, and the books balance at the end.
func TestH1PoolUnderContention(t *testing.T) {
	const max = 3
	pp := newPipePool(max, 10*time.Second, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				c, err := pp.take()
				if err != nil {
					t.Error(err)
					return
				}
				if (g+i)%7 == 0 {
					pp.closeConn(c)
				} else {
					pp.put(c)
				}
			}
		})
	}
	wg.Wait()
	if most := pp.most.Load(); most > max {
		t.Fatalf("%d connections open at once, max %d", most, max)
	}
	if open, places, idle := int(pp.open.Load()), pp.openConns(), pp.idleConns(); open != places || idle != places || pp.stats.idle.Load() != int64(idle) {
		t.Fatalf("at rest: %d open, %d places, %d idle (%d counted); want all equal", open, places, idle, pp.stats.idle.Load())
	}
	pp.close(false)
	if open, places := pp.open.Load(), pp.openConns(); open != 0 || places != 0 {
		t.Fatalf("after close: %d open, %d places", open, places)
	}
}
