package topview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// fakeAdmin answers the four endpoints Fetch reads, for apps "b" (the
// busiest) and "a", and records the top queries.
func fakeAdmin(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var tops []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/instance", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"role":"active","overload_factor":1,"build":{"version":"v9"}}`))
	})
	mux.HandleFunc("GET /api/apps", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("limit") != "5" {
			http.Error(w, `{"error":"want limit=5"}`, http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"total":2,"apps":[{"name":"b","requests_per_second":9},{"name":"a"}]}`))
	})
	mux.HandleFunc("GET /api/apps/{app}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("app") == "nope" {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no such app: \"nope\""}`))
			return
		}
		w.Write([]byte(`{"name":"` + r.PathValue("app") + `","top_k":10}`))
	})
	mux.HandleFunc("GET /api/apps/{app}/top", func(w http.ResponseWriter, r *http.Request) {
		tops = append(tops, r.PathValue("app")+"?"+r.URL.RawQuery)
		w.Write([]byte(`{"by":"bytes","window":"10m","clients":[{"client":"c1","count":5}]}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &tops
}

func TestFetch(t *testing.T) {
	srv, tops := fakeAdmin(t)
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	c := &Client{Base: srv.URL + "/", HTTP: srv.Client(), Clock: clock.NewFake(at)}
	s, err := c.Fetch(context.Background(), Query{By: "bytes", Window: "10m", Apps: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Time.Equal(at) || s.Instance.Build.Version != "v9" || s.Total != 2 || s.App == nil || s.App.Name != "b" ||
		s.Top == nil || s.Top.Clients[0].Client != "c1" {
		t.Fatalf("snapshot %+v", s)
	}
	if _, err := c.Fetch(context.Background(), Query{App: "a", Apps: 5}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b?by=bytes&window=10m", "a?"}; strings.Join(*tops, " ") != strings.Join(want, " ") {
		t.Fatalf("top queries %q, want %q", *tops, want)
	}

	_, err = c.Fetch(context.Background(), Query{App: "nope", Apps: 5})
	if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), `no such app: "nope"`) {
		t.Fatalf("unknown app: %v", err)
	}
	_, err = c.Fetch(context.Background(), Query{})
	if err == nil || !strings.Contains(err.Error(), "want limit=5") {
		t.Fatalf("API error: %v", err)
	}
}

func TestFetchUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = (&Client{Base: base}).Fetch(context.Background(), Query{})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), base) {
		t.Fatalf("Fetch from a closed port: %v", err)
	}

	notLevee := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("<html>hello</html>"))
	}))
	defer notLevee.Close()
	_, err = (&Client{Base: notLevee.URL}).Fetch(context.Background(), Query{})
	if err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("Fetch from a web page: %v", err)
	}
}
