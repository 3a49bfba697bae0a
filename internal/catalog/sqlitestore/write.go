package sqlitestore

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
)

// write runs fn in one transaction with the write statements prepared,
// prunes the changes and commits.
func (s *Store) write(ctx context.Context, fn func(catalog.WriteTx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	defer tx.Rollback()
	st, err := prepare(ctx, tx)
	if err != nil {
		return err
	}
	defer st.close()
	if err := fn(st); err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	if err := prune(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	return nil
}

// writeTx is a write transaction's prepared statements.
type writeTx struct {
	getConfig, putApp, delApp, delRoutes, routeOwner, putRoute, addChange *sql.Stmt
}

var _ catalog.WriteTx = (*writeTx)(nil)

func prepare(ctx context.Context, tx *sql.Tx) (*writeTx, error) {
	var st writeTx
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.getConfig, `SELECT config FROM apps WHERE name = ?`},
		{&st.putApp, `INSERT INTO apps (name, config, version) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET config = excluded.config, version = excluded.version`},
		{&st.delApp, `DELETE FROM apps WHERE name = ?`},
		{&st.delRoutes, `DELETE FROM routes WHERE app = ?`},
		{&st.routeOwner, `SELECT app FROM routes WHERE host = ? AND path = ?`},
		{&st.putRoute, `INSERT INTO routes (host, path, app) VALUES (?, ?, ?)`},
		{&st.addChange, `INSERT INTO changes (app, hosts, at) VALUES (?, ?, ?)`},
	} {
		s, err := tx.PrepareContext(ctx, p.q)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		*p.dst = s
	}
	return &st, nil
}

func (st *writeTx) close() {
	for _, s := range []*sql.Stmt{st.getConfig, st.putApp, st.delApp, st.delRoutes, st.routeOwner, st.putRoute, st.addChange} {
		if s != nil {
			s.Close()
		}
	}
}

func (st *writeTx) Config(ctx context.Context, app string) ([]byte, bool, error) {
	var cfg []byte
	switch err := st.getConfig.QueryRowContext(ctx, app).Scan(&cfg); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return cfg, true, nil
}

func (st *writeTx) Change(ctx context.Context, app string, hosts []string, at time.Time) (int64, error) {
	r, err := st.addChange.ExecContext(ctx, app, strings.Join(hosts, "\n"), at.UnixNano())
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
}

func (st *writeTx) PutApp(ctx context.Context, app string, cfg []byte, version int64) error {
	_, err := st.putApp.ExecContext(ctx, app, cfg, version)
	return err
}

func (st *writeTx) DeleteApp(ctx context.Context, app string) (bool, error) {
	r, err := st.delApp.ExecContext(ctx, app)
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n > 0, err
}

func (st *writeTx) DeleteRoutes(ctx context.Context, app string) error {
	_, err := st.delRoutes.ExecContext(ctx, app)
	return err
}

func (st *writeTx) RouteOwner(ctx context.Context, host, path string) (string, bool, error) {
	var owner string
	switch err := st.routeOwner.QueryRowContext(ctx, host, path).Scan(&owner); {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return owner, true, nil
}

func (st *writeTx) PutRoute(ctx context.Context, host, path, app string) error {
	_, err := st.putRoute.ExecContext(ctx, host, path, app)
	return err
}

// prune keeps the last MaxChanges change rows.
func prune(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM changes WHERE version <= (SELECT MAX(version) FROM changes) - ?`, MaxChanges)
	if err != nil {
		return fmt.Errorf("sqlitestore: prune changes: %w", err)
	}
	return nil
}

// Export writes every app as JSONL, by name: the import format, so an
// export imports back to the same catalog.
func (s *Store) Export(ctx context.Context, w io.Writer) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, config FROM apps ORDER BY name`)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %w", err)
	}
	defer rows.Close()
	bw := bufio.NewWriter(w)
	n := 0
	for rows.Next() {
		var name string
		var cfg []byte
		if err := rows.Scan(&name, &cfg); err != nil {
			return n, fmt.Errorf("sqlitestore: %w", err)
		}
		line, err := config.AppJSONLine(name, cfg)
		if err != nil {
			return n, fmt.Errorf("sqlitestore: %w", err)
		}
		bw.Write(line)
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("sqlitestore: %w", err)
	}
	return n, bw.Flush()
}

// Stats counts the file's contents. It scans the routes index: seconds at
// millions of apps.
func (s *Store) Stats(ctx context.Context) (catalog.StoreStats, error) {
	var st catalog.StoreStats
	for _, q := range []struct {
		dst *int64
		sql string
	}{
		{&st.Apps, `SELECT COUNT(*) FROM apps`},
		{&st.Routes, `SELECT COUNT(*) FROM routes`},
		{&st.Hosts, `SELECT COUNT(DISTINCT host) FROM routes`},
		{&st.WildcardHosts, `SELECT COUNT(DISTINCT host) FROM routes WHERE host LIKE '*.%'`},
		{&st.Changes, `SELECT COUNT(*) FROM changes`},
		{&st.OldestChange, `SELECT COALESCE(MIN(version), 0) FROM changes`},
		{&st.Bytes, `SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`},
	} {
		if err := s.db.QueryRowContext(ctx, q.sql).Scan(q.dst); err != nil {
			return st, fmt.Errorf("sqlitestore: stats: %w", err)
		}
	}
	v, err := s.Version(ctx)
	st.Version = v
	return st, err
}
