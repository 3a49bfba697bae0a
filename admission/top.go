package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/leveeproxy/levee/internal/topk"
)

// By is what the top clients are ranked by.
type By int

// The measures of Gate.Top, in the order and the words of levee's admin
// API (by=).
const (
	ByRequests By = iota // requests
	ByRejected           // requests refused by a limit
	ByBytes              // request and response body bytes
	ByItems              // batch items (Limits.Batch)
)

// Window is how far back the top clients are counted.
type Window int

// The windows of Gate.Top, in the words of levee's admin API (window=).
// A report covers between half the window and the window.
const (
	Last10s Window = iota
	Last1m
	Last10m
)

// String returns b as levee's admin API names it ("requests"...).
func (b By) String() string {
	if b < 0 || int(b) >= len(topk.Dimensions) {
		return fmt.Sprintf("By(%d)", int(b))
	}
	return topk.Dimensions[b]
}

// String returns w as levee's admin API names it ("10s", "1m", "10m").
func (w Window) String() string {
	if w < 0 || int(w) >= len(topk.WindowNames) {
		return fmt.Sprintf("Window(%d)", int(w))
	}
	return topk.WindowNames[w]
}

// MarshalText and UnmarshalText write and read b as String names it, so
// a TopReport's JSON reads as levee's admin API's.
func (b By) MarshalText() ([]byte, error) { return marshalIndex(int(b), topk.Dimensions[:], "by") }
func (b *By) UnmarshalText(s []byte) error {
	return unmarshalIndex((*int)(b), string(s), topk.Dimensions[:], topk.ErrBy)
}

// MarshalText and UnmarshalText write and read w as String names it.
func (w Window) MarshalText() ([]byte, error) {
	return marshalIndex(int(w), topk.WindowNames[:], "window")
}
func (w *Window) UnmarshalText(s []byte) error {
	return unmarshalIndex((*int)(w), string(s), topk.WindowNames[:], topk.ErrWindow)
}

func marshalIndex(i int, names []string, what string) ([]byte, error) {
	if i < 0 || i >= len(names) {
		return nil, fmt.Errorf("admission: no %s %d", what, i)
	}
	return []byte(names[i]), nil
}

func unmarshalIndex(dst *int, s string, names []string, bad error) error {
	for i, n := range names {
		if n == s {
			*dst = i
			return nil
		}
	}
	return fmt.Errorf("admission: %w", bad)
}

// TopReport is the heaviest clients by one measure over one window, as
// levee's admin API reports an app's (GET /api/apps/{app}/top):
// Space-Saving summaries of Limits.Client.TopK clients, so a listed
// client's Count is an upper bound, at most ErrorBound (its own Err) over
// the truth.
type TopReport struct {
	By         By         `json:"by"`
	Window     Window     `json:"window"`
	ErrorBound uint64     `json:"error_bound"`
	Clients    []TopShare `json:"clients"`
}

// TopShare is one client of a TopReport: Share is Count over the measure's
// total in the window (an upper bound, as Count is).
type TopShare struct {
	Client string  `json:"client"`
	Count  uint64  `json:"count"`
	Err    uint64  `json:"error"`
	Share  float64 `json:"share"`
}

// ErrTopOff is Top's error when the gate keeps no top clients
// (Limits.Client.TopK is off).
var ErrTopOff = errors.New("admission: top clients are off (Limits.Client.TopK)")

// Top returns the heaviest clients by a measure over a window. A client
// is its Limits.Client.Key when that is a header the request has, else
// the peer's address. It returns ErrTopOff when the gate keeps no top
// clients, or an error for a By or Window that is none of the constants.
func (g *Gate) Top(by By, w Window) (TopReport, error) {
	if _, err := by.MarshalText(); err != nil {
		return TopReport{}, err
	}
	if _, err := w.MarshalText(); err != nil {
		return TopReport{}, err
	}
	top := g.h.Top()
	if top == nil {
		return TopReport{}, ErrTopOff
	}
	r := top.Report(int(by), int(w), 0, 0, g.h.Now())
	out := TopReport{By: by, Window: w, ErrorBound: r.ErrorBound, Clients: make([]TopShare, len(r.Clients))}
	for i, c := range r.Clients {
		out.Clients[i] = TopShare(c)
	}
	return out, nil
}

// TopHandler serves Top as JSON, as levee's admin API does: GET
// ?by=requests&window=10s (the defaults), the report or {"error": "..."}
// with 400. Mount it where only operators reach it: client keys are
// what the clients sent.
func (g *Gate) TopHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep, err := g.topQuery(r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// topQuery is Top of a request's by= and window= (absent: ByRequests, Last10s).
func (g *Gate) topQuery(r *http.Request) (TopReport, error) {
	by, window := ByRequests, Last10s
	q := r.URL.Query()
	if s := q.Get("by"); s != "" {
		if err := by.UnmarshalText([]byte(s)); err != nil {
			return TopReport{}, err
		}
	}
	if s := q.Get("window"); s != "" {
		if err := window.UnmarshalText([]byte(s)); err != nil {
			return TopReport{}, err
		}
	}
	return g.Top(by, window)
}
