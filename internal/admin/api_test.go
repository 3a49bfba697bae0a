package admin

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
	"github.com/prometheus/client_golang/prometheus"
)

// staticAPI is a fixed view of one app, "a".
type staticAPI struct{}

func (staticAPI) Apps(int) ([]apps.AppSummary, int) { return []apps.AppSummary{{Name: "a"}}, 1 }
func (staticAPI) App(name string) (apps.AppDetail, bool) {
	return apps.AppDetail{AppSummary: apps.AppSummary{Name: name}}, name == "a"
}
func (staticAPI) Top(app, by, window string) (topk.Report, bool, error) {
	if by != "requests" {
		return topk.Report{}, true, errors.New("by must be one of [requests]")
	}
	return topk.Report{}, app == "a", nil
}
func (staticAPI) Instance() Instance {
	return Instance{Instance: apps.Instance{Role: "active"}}
}

// openStream opens GET /api/events and reads its first event.
func openStream(t *testing.T, url string) (*http.Response, error) {
	t.Helper()
	resp, err := http.Get(url + "/api/events")
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	return resp, sc.Err()
}

// TestEventStreamsAreBounded: at most MaxSubscribers streams; one more is
// refused 503 with Retry-After; closing one makes room; shutdown (Done)
// ends them all.
func TestEventStreamsAreBounded(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewServer(Handler(Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:0",
		API: staticAPI{}, Done: done}))
	defer srv.Close()
	var open []*http.Response
	for range MaxSubscribers {
		resp, err := openStream(t, srv.URL)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v %v", len(open), resp, err)
		}
		open = append(open, resp)
	}
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("stream %d: %d; want 503 with Retry-After", MaxSubscribers+1, resp.StatusCode)
	}
	open[0].Body.Close()
	var again *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for { // the server sees the close at its next write, within a second
		if again, err = openStream(t, srv.URL); err == nil && again.StatusCode == http.StatusOK {
			break
		}
		if again != nil {
			again.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed stream's place was not given back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	open[0] = again
	close(done)
	var wg sync.WaitGroup
	for _, r := range open {
		wg.Go(func() {
			defer r.Body.Close()
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
			}
		})
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("streams did not end at shutdown")
	}
}
