package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
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
func openACME(ctx context.Context, cfg *config.Config, log *slog.Logger) (c *liveCerts, close func(), err error) {
	if !cfg.TLS.ACME.On() {
		return nil, func() {}, nil
	}
	st, err := openACMEStorage(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	m := acme.New(acme.Options{Config: cfg, Storage: st, Logger: log})
	return &liveCerts{mgr: m, st: st}, func() { m.Close(); st.Close() }, nil
}
