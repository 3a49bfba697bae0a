package catalog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/leaktest"
)

// notifyStore is a memStore that is a Notifier: the test says when a
// notice goes out, and whether it is lost.
type notifyStore struct {
	*memStore
	notices chan struct{}
	left    chan struct{} // closed when Listen returns
}

func (s *notifyStore) Listen(ctx context.Context, wake chan<- struct{}) {
	defer close(s.left)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notices:
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// A notice makes the watcher poll at once; a lost one only delays the
// change until the periodic poll, which remains the safety net.
func TestRunPollsOnNoticeAndStillOnTimer(t *testing.T) {
	leaktest.Check(t)
	st := &notifyStore{memStore: newMemStore(), notices: make(chan struct{}), left: make(chan struct{})}
	st.put("a", []string{"a.example"})
	clk := clock.NewFake(time.Unix(1000, 0))
	l, _ := newLazy(t, st, LazyOptions[*val]{Clock: clk, Watch: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); l.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	<-clk.TimerCreated() // Run is waiting
	if v, err := l.Load(ctx, "a.example", "/"); err != nil || v.version != 1 {
		t.Fatalf("load: %v %v", v, err)
	}
	version := func() int64 { v, _ := l.Lookup("a.example", "/"); return v.version }

	st.put("a", []string{"a.example"}) // version 2
	st.notices <- struct{}{}
	waitFor(t, func() bool { return version() == 2 })
	<-clk.TimerCreated() // waiting again, with no time passed

	st.put("a", []string{"a.example"}) // version 3, its notice lost
	if version() != 2 {
		t.Fatal("changed without a notice or a poll")
	}
	clk.Advance(time.Hour)
	waitFor(t, func() bool { return version() == 3 })

	cancel()
	<-ran
	select {
	case <-st.left:
	default:
		t.Fatal("Run returned before its listener")
	}
}

// A certificate change reaches OnCertificates, in order, and leaves the
// cached host of the app it names cached: it changes no app.
func TestPollTellsCertificatesAndKeepsTheApp(t *testing.T) {
	st := newMemStore()
	st.put("a", []string{"a.example"})
	l, _ := newLazy(t, st, LazyOptions[*val]{})
	ctx := context.Background()
	if _, err := l.Load(ctx, "a.example", "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	var told [][]string
	l.OnCertificates(func(hosts []string) { told = append(told, hosts) })
	st.note("a.example", "b.example")
	st.note("c.example")
	if n, err := l.Poll(ctx); err != nil || n != 2 {
		t.Fatalf("poll: %d %v", n, err)
	}
	if len(told) != 1 || strings.Join(told[0], " ") != "a.example b.example c.example" {
		t.Fatalf("told %q", told)
	}
	if _, ok := l.Lookup("a.example", "/"); !ok {
		t.Fatal("a certificate change dropped the app's cached host")
	}
}
