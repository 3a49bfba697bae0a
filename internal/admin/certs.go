package admin

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
)

// Certs is the view of the ACME certificates (tls.acme) the admin API
// serves: those in the store, and a renewal on demand.
type Certs interface {
	// List is up to limit stored certificates, soonest expiry first.
	List(ctx context.Context, limit int) ([]acme.CertInfo, error)
	// Show is one name's certificate or last failure; fs.ErrNotExist for none.
	Show(ctx context.Context, name string) (acme.CertInfo, error)
	// Renew renews name's certificate now; acme.ErrNotEligible when no
	// app claims it with tls: acme.
	Renew(ctx context.Context, name string) error
}

// certsTimeout bounds a listing; renewTimeout a renewal on demand.
const (
	certsTimeout = 10 * time.Second
	renewTimeout = 3 * time.Minute
)

// registerCerts serves GET /api/certs (?limit=N, ?expiring=DURATION:
// only those expiring within it), GET /api/certs/{name} and
// POST /api/certs/{name}/renew (mutating).
func registerCerts(mux *http.ServeMux, g *guard, c Certs) {
	mux.HandleFunc("GET /api/certs", func(w http.ResponseWriter, r *http.Request) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var within time.Duration
		if e := r.URL.Query().Get("expiring"); e != "" {
			d, err := time.ParseDuration(e)
			if err != nil || d <= 0 {
				jsonError(w, http.StatusBadRequest, "expiring: want a duration such as 336h")
				return
			}
			within = d
		}
		ctx, cancel := context.WithTimeout(r.Context(), certsTimeout)
		defer cancel()
		list, err := c.List(ctx, limit)
		if err != nil {
			jsonError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		if within > 0 {
			cut := time.Now().Add(within)
			kept := list[:0]
			for _, ci := range list {
				if ci.NotAfter.Before(cut) {
					kept = append(kept, ci)
				}
			}
			list = kept
		}
		writeJSON(w, map[string]any{"acme": true, "certs": list})
	})
	mux.HandleFunc("GET /api/certs/{name}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), certsTimeout)
		defer cancel()
		ci, err := c.Show(ctx, r.PathValue("name"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			jsonError(w, http.StatusNotFound, "no certificate for this name")
		case err != nil:
			jsonError(w, http.StatusServiceUnavailable, err.Error())
		default:
			writeJSON(w, ci)
		}
	})
	mux.HandleFunc("POST /api/certs/{name}/renew", g.mutating(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), renewTimeout)
		defer cancel()
		err := c.Renew(ctx, r.PathValue("name"))
		switch {
		case errors.Is(err, acme.ErrNotEligible):
			jsonError(w, http.StatusNotFound, err.Error())
		case err != nil:
			jsonError(w, http.StatusBadGateway, err.Error())
		default:
			writeJSON(w, map[string]any{"ok": true})
		}
	}))
}
