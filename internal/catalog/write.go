package catalog

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// PutResult counts what a store's Put did.
type PutResult struct {
	Added, Changed, Unchanged int
}

// StoreStats describe a store's contents, for levee catalog stats.
type StoreStats struct {
	Apps, Routes, Hosts, WildcardHosts int64
	Version                            int64 // of the latest change
	Changes                            int64 // change rows kept
	OldestChange                       int64
	Bytes                              int64 // on disk: the file, or the tables and their indexes
}

// WriteTx is one write transaction of a store: the steps Put and Delete
// are made of, so that every store writes with the same rules.
// Its errors need not name the store; the store's caller wraps them.
type WriteTx interface {
	// Config is the stored config of app; ok is false when there is none.
	Config(ctx context.Context, app string) (cfg []byte, ok bool, err error)
	// Change records a write of app, with its hosts after it (none after a
	// delete) and the write's time, and returns the change's version,
	// greater than every version before it.
	Change(ctx context.Context, app string, hosts []string, at time.Time) (int64, error)
	// PutApp inserts or replaces app's row.
	PutApp(ctx context.Context, app string, cfg []byte, version int64) error
	// DeleteApp removes app's row, and says whether there was one.
	DeleteApp(ctx context.Context, app string) (bool, error)
	// DeleteRoutes removes every route of app.
	DeleteRoutes(ctx context.Context, app string) error
	// RouteOwner is the app holding host and path; ok is false for none.
	RouteOwner(ctx context.Context, host, path string) (app string, ok bool, err error)
	// PutRoute gives host and path (free: checked by RouteOwner) to app.
	PutRoute(ctx context.Context, host, path, app string) error
}

// RunTx runs fn in one write transaction of a store, committing it when
// fn succeeds and rolling it back otherwise.
type RunTx func(ctx context.Context, fn func(WriteTx) error) error

// Writer gives a store its Put and Delete, written once for every store
// over the store's transactions (embed it, with Run set).
type Writer struct {
	Run RunTx
}

// Put writes apps (validated by internal/config) in one transaction: all
// or none. An app whose stored config is the same is left alone (no
// change); any other write records a change. A host and path claimed by
// another app fails the whole Put.
func (w Writer) Put(ctx context.Context, apps []config.AppSource, now time.Time) (PutResult, error) {
	var res PutResult
	err := w.Run(ctx, func(tx WriteTx) error {
		res = PutResult{}
		return putApps(ctx, tx, apps, now, &res)
	})
	return res, err
}

// Delete removes the named apps in one transaction (absent ones are
// ignored), recording a change for each removed one, and returns how many
// it removed.
func (w Writer) Delete(ctx context.Context, names []string, now time.Time) (int, error) {
	var n int
	err := w.Run(ctx, func(tx WriteTx) (err error) {
		n, err = deleteApps(ctx, tx, names, now)
		return err
	})
	return n, err
}

// NoteCertificates records that certificates for hosts were written
// (issued or renewed) as one change of CertificateApp, so that every
// watcher of the store is told (LazyOptions.Certificates). It touches no
// app.
func (w Writer) NoteCertificates(ctx context.Context, hosts []string, now time.Time) error {
	return w.Run(ctx, func(tx WriteTx) error {
		_, err := tx.Change(ctx, CertificateApp, lowerAll(hosts), now)
		return err
	})
}

func putApps(ctx context.Context, tx WriteTx, apps []config.AppSource, now time.Time, res *PutResult) error {
	for _, a := range apps {
		r := Record{Name: a.Name, Config: a.Config, Hosts: a.App.Hosts, Paths: a.App.Paths}
		old, ok, err := tx.Config(ctx, r.Name)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", r.Name, err)
		case !ok:
			res.Added++
		case bytes.Equal(old, r.Config):
			res.Unchanged++
			continue
		default:
			res.Changed++
		}
		hosts := lowerAll(r.Hosts)
		v, err := tx.Change(ctx, r.Name, hosts, now)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		if err := tx.PutApp(ctx, r.Name, r.Config, v); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		if err := tx.DeleteRoutes(ctx, r.Name); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		for _, h := range hosts {
			for _, p := range r.Paths {
				switch owner, taken, err := tx.RouteOwner(ctx, h, p); {
				case err != nil:
					return fmt.Errorf("%s: %w", r.Name, err)
				case taken:
					return fmt.Errorf("apps.%s: host %s path %s is already claimed by app %s", r.Name, h, p, owner)
				}
				if err := tx.PutRoute(ctx, h, p, r.Name); err != nil {
					return fmt.Errorf("%s: %w", r.Name, err)
				}
			}
		}
	}
	return nil
}

func deleteApps(ctx context.Context, tx WriteTx, names []string, now time.Time) (int, error) {
	n := 0
	for _, name := range names {
		ok, err := tx.DeleteApp(ctx, name)
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if !ok {
			continue
		}
		n++
		if err := tx.DeleteRoutes(ctx, name); err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tx.Change(ctx, name, nil, now); err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
	}
	return n, nil
}

func lowerAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}
