package pgstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// write runs fn in one transaction that holds the changes table
// exclusively (writers take turns, so versions commit in order; readers
// are not blocked), prunes the changes, notifies and commits.
func (s *Store) write(ctx context.Context, fn func(catalog.WriteTx) error) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE changes IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		w := &writeTx{tx: tx}
		if err := fn(w); err != nil {
			return err
		}
		if w.last == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM changes WHERE version <= $1`, w.last-MaxChanges); err != nil {
			return fmt.Errorf("prune changes: %w", err)
		}
		// Delivered when the transaction commits, and only then.
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, strconv.FormatInt(w.last, 10))
		return err
	})
}

// writeTx is one write transaction.
type writeTx struct {
	tx   pgx.Tx
	last int64 // the last change's version
}

var _ catalog.WriteTx = (*writeTx)(nil)

func (w *writeTx) Config(ctx context.Context, app string) ([]byte, bool, error) {
	var cfg []byte
	switch err := w.tx.QueryRow(ctx, `SELECT config FROM apps WHERE name = $1`, app).Scan(&cfg); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return cfg, true, nil
}

func (w *writeTx) Change(ctx context.Context, app string, hosts []string, at time.Time) (int64, error) {
	if hosts == nil {
		hosts = []string{} // an empty array, not NULL
	}
	err := w.tx.QueryRow(ctx, `INSERT INTO changes (app, hosts, at) VALUES ($1, $2, $3) RETURNING version`,
		app, hosts, at).Scan(&w.last)
	return w.last, err
}

func (w *writeTx) PutApp(ctx context.Context, app string, cfg []byte, version int64) error {
	_, err := w.tx.Exec(ctx, `INSERT INTO apps (name, config, version) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET config = excluded.config, version = excluded.version`, app, string(cfg), version)
	return err
}

func (w *writeTx) DeleteApp(ctx context.Context, app string) (bool, error) {
	tag, err := w.tx.Exec(ctx, `DELETE FROM apps WHERE name = $1`, app)
	return tag.RowsAffected() > 0, err
}

func (w *writeTx) DeleteRoutes(ctx context.Context, app string) error {
	_, err := w.tx.Exec(ctx, `DELETE FROM routes WHERE app = $1`, app)
	return err
}

func (w *writeTx) RouteOwner(ctx context.Context, host, path string) (string, bool, error) {
	var owner string
	switch err := w.tx.QueryRow(ctx, `SELECT app FROM routes WHERE host = $1 AND path = $2`, host, path).Scan(&owner); {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return owner, true, nil
}

func (w *writeTx) PutRoute(ctx context.Context, host, path, app string) error {
	_, err := w.tx.Exec(ctx, `INSERT INTO routes (host, path, app) VALUES ($1, $2, $3)`, host, path, app)
	return err
}

// Export writes every app as JSONL, by name: the import format, so an
// export imports back to the same catalog.
func (s *Store) Export(ctx context.Context, w io.Writer) (int, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	rows, err := s.pool.Query(ctx, `SELECT name, config FROM apps ORDER BY name`)
	if err != nil {
		return 0, s.fail(err)
	}
	bw := bufio.NewWriter(w)
	n := 0
	var name string
	var cfg []byte
	_, err = pgx.ForEachRow(rows, []any{&name, &cfg}, func() error {
		line, err := config.AppJSONLine(name, cfg)
		if err != nil {
			return err
		}
		n++
		_, err = bw.Write(line)
		return err
	})
	if err != nil {
		return n, s.fail(err)
	}
	return n, bw.Flush()
}

// Stats counts the catalog's contents. It scans the routes index: seconds
// at millions of apps.
func (s *Store) Stats(ctx context.Context) (catalog.StoreStats, error) {
	var st catalog.StoreStats
	if err := s.ready(); err != nil {
		return st, err
	}
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT COUNT(*) FROM apps),
		(SELECT COUNT(*) FROM routes),
		(SELECT COUNT(DISTINCT host) FROM routes),
		(SELECT COUNT(DISTINCT host) FROM routes WHERE host LIKE '*.%'),
		(SELECT COUNT(*) FROM changes),
		(SELECT COALESCE(MIN(version), 0) FROM changes),
		(SELECT SUM(pg_total_relation_size(t))::bigint FROM unnest(ARRAY['apps', 'routes', 'changes', 'meta']::regclass[]) t)`).
		Scan(&st.Apps, &st.Routes, &st.Hosts, &st.WildcardHosts, &st.Changes, &st.OldestChange, &st.Bytes)
	if err != nil {
		return st, fmt.Errorf("%w (stats)", s.fail(err))
	}
	st.Version, err = s.Version(ctx)
	return st, err
}
