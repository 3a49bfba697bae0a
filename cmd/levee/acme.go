package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/catalog/sqlitestore"
	"github.com/leveeproxy/levee/internal/config"
)

// acmeOpenTimeout bounds opening the ACME store at start (its tables made,
// the key file checked against what is stored).
const acmeOpenTimeout = 10 * time.Second

// openACMEStorage opens tls.acme's store in the catalog's database.
func openACMEStorage(ctx context.Context, cfg *config.Config) (*acme.Storage, error) {
	ctx, cancel := context.WithTimeout(ctx, acmeOpenTimeout)
	defer cancel()
	st, err := acme.OpenStorage(ctx, acme.StorageOptions{SQLite: cfg.Catalog.SQLite, Postgres: cfg.Catalog.Postgres,
		Key: cfg.TLS.ACME.Key()})
	if err != nil {
		return nil, fmt.Errorf("tls.acme: %w", err)
	}
	return st, nil
}

// openACME makes the ACME manager of levee serve and its admin view, nil
// when tls.acme is off. A key file that does not open the store is an error here, at start.
// close closes the manager (after Serve) and its store.
// The certificates it writes are noted in catalog's change feed, for the
// rest of the fleet: through cat (PostgreSQL), or a writer of the SQLite
// file of its own (levee serve reads that catalog read-only).
func openACME(ctx context.Context, cfg *config.Config, cat catalog.Store, log *slog.Logger) (c *liveCerts, close func(), err error) {
	if !cfg.TLS.ACME.On() {
		return nil, func() {}, nil
	}
	notes, _ := cat.(acme.Notes)
	closeNotes := func() error { return nil }
	if notes == nil && cfg.Catalog.SQLite != "" {
		w, err := sqlitestore.Create(cfg.Catalog.SQLite)
		if err != nil {
			return nil, nil, fmt.Errorf("tls.acme: the catalog's change feed: %w", err)
		}
		notes, closeNotes = w, w.Close
	}
	st, err := openACMEStorage(ctx, cfg)
	if err != nil {
		closeNotes()
		return nil, nil, err
	}
	m := acme.New(acme.Options{Config: cfg, Storage: st, Logger: log, Notes: notes})
	return &liveCerts{mgr: m, st: st}, func() { m.Close(); st.Close(); closeNotes() }, nil
}
