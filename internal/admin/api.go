package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
)

// API is the live view of the running proxy the JSON endpoints serve
// (docs/admin.md). Each method returns a value encoded as JSON as is. None
// may block on the request path: the server reads what requests write
// without taking a lock they need.
type API interface {
	// Apps lists the apps serving, busiest first, at most limit (≤ 0: all),
	// and how many there are.
	Apps(limit int) (list []apps.AppSummary, total int)
	// App is one app's detail; false for an app not serving.
	App(name string) (apps.AppDetail, bool)
	// Top is app's heaviest clients by a dimension over a window; ok false:
	// no such app; err: a bad by or window, named in its message.
	Top(app, by, window string) (report topk.Report, ok bool, err error)
	// Instance is this levee: role, scale, cluster, version, config.
	Instance() Instance
}

// Instance is GET /api/instance: the server's view of this instance, with
// what only the process knows (its build and config file).
type Instance struct {
	apps.Instance
	Build      Build  `json:"build"`
	ConfigFile string `json:"config_file,omitempty"`
}

// Build is what the binary knows of its build: the version, and the VCS
// revision go build stamped it with (none in a test binary or without VCS).
type Build struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	GoVersion string `json:"go_version"`
}

// The bounds of GET /api/events.
const (
	// MaxSubscribers is the most event streams open at once; one more is
	// refused 503, so the admin plane cannot be what falls over.
	MaxSubscribers = 16
	// EventEvery is how often a stream gets a snapshot.
	EventEvery = time.Second
	// eventWrite bounds each event's write: a subscriber that stops
	// reading is dropped, not waited for.
	eventWrite = 5 * time.Second
	// EventApps is how many apps (the busiest) an event lists.
	EventApps = 100
	// DefaultListApps is how many apps GET /api/apps lists without
	// ?limit=; maxListApps bounds ?limit=.
	DefaultListApps = 100
	maxListApps     = 100_000
)

// apiHandlers serves the JSON endpoints on mux.
type apiHandlers struct {
	api         API
	done        <-chan struct{} // closed at shutdown: streams end
	subscribers atomic.Int32
}

func (h *apiHandlers) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/apps", h.apps)
	mux.HandleFunc("GET /api/apps/{app}", h.app)
	mux.HandleFunc("GET /api/apps/{app}/top", h.top)
	mux.HandleFunc("GET /api/instance", h.instance)
	mux.HandleFunc("GET /api/events", h.events)
}

func (h *apiHandlers) apps(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", DefaultListApps, 1, maxListApps)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	apps, total := h.api.Apps(limit)
	writeJSON(w, map[string]any{"apps": apps, "total": total})
}

func (h *apiHandlers) app(w http.ResponseWriter, r *http.Request) {
	d, ok := h.api.App(r.PathValue("app"))
	if !ok {
		jsonError(w, http.StatusNotFound, "no such app: "+strconv.Quote(r.PathValue("app")))
		return
	}
	writeJSON(w, d)
}

func (h *apiHandlers) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by, window := q.Get("by"), q.Get("window")
	if by == "" {
		by = "requests"
	}
	if window == "" {
		window = "1m"
	}
	rep, ok, err := h.api.Top(r.PathValue("app"), by, window)
	switch {
	case err != nil:
		jsonError(w, http.StatusBadRequest, err.Error())
	case !ok:
		jsonError(w, http.StatusNotFound, "no such app: "+strconv.Quote(r.PathValue("app")))
	default:
		writeJSON(w, rep)
	}
}

func (h *apiHandlers) instance(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, h.api.Instance())
}

// event is one snapshot of GET /api/events.
type event struct {
	Time     time.Time         `json:"time"`
	Instance Instance          `json:"instance"`
	Apps     []apps.AppSummary `json:"apps"`
	Total    int               `json:"total"`
	// App and Top are the detail of ?app= and its heaviest clients (by
	// ?by=, over ?window=), when asked for.
	App *apps.AppDetail `json:"app,omitempty"`
	Top *topk.Report    `json:"top,omitempty"`
}

// events streams a snapshot a second as server-sent events until the
// client goes, the server shuts down, or a write stalls.
func (h *apiHandlers) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, by, window := q.Get("app"), q.Get("by"), q.Get("window")
	if by == "" {
		by = "requests"
	}
	if window == "" {
		window = "10s"
	}
	if name != "" {
		if _, ok, err := h.api.Top(name, by, window); err != nil {
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		} else if !ok {
			jsonError(w, http.StatusNotFound, "no such app: "+strconv.Quote(name))
			return
		}
	}
	if h.subscribers.Add(1) > MaxSubscribers {
		h.subscribers.Add(-1)
		w.Header().Set("Retry-After", "5")
		jsonError(w, http.StatusServiceUnavailable, "too many event streams open (at most "+strconv.Itoa(MaxSubscribers)+")")
		return
	}
	defer h.subscribers.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	t := time.NewTicker(EventEvery)
	defer t.Stop()
	enc := json.NewEncoder(w)
	for {
		ev := event{Time: time.Now().UTC(), Instance: h.api.Instance()}
		ev.Apps, ev.Total = h.api.Apps(EventApps)
		if name != "" {
			if d, ok := h.api.App(name); ok {
				top, _, _ := h.api.Top(name, by, window) // checked above
				ev.App, ev.Top = &d, &top
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(eventWrite))
		if _, err := w.Write([]byte("event: snapshot\ndata: ")); err != nil {
			return
		}
		// Encode ends the JSON with a newline; a blank line ends the event.
		if enc.Encode(ev) != nil {
			return
		}
		if _, err := w.Write([]byte("\n")); err != nil || rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-t.C:
		}
	}
}

// intParam reads query parameter key as an integer in [lo, hi], or def
// when it is absent.
func intParam(r *http.Request, key string, def, lo, hi int) (int, error) {
	s := r.URL.Query().Get(key)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, errors.New(key + " must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi))
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
