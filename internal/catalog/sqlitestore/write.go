package sqlitestore

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/config"
)

// PutResult counts what Put did.
type PutResult struct {
	Added, Changed, Unchanged int
}

// Put writes apps (validated by internal/config) in one transaction: all
// or none. An app whose stored config is the same is left alone (no
// change row); any other write records a change for watchers. A host and
// path claimed by another app already in the file fails the whole Put.
func (s *Store) Put(ctx context.Context, apps []config.AppSource, now time.Time) (PutResult, error) {
	var res PutResult
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("sqlitestore: %w", err)
	}
	defer tx.Rollback()
	st, err := prepare(ctx, tx)
	if err != nil {
		return res, err
	}
	defer st.close()
	for _, a := range apps {
		var old []byte
		switch err := st.getConfig.QueryRowContext(ctx, a.Name).Scan(&old); {
		case errors.Is(err, sql.ErrNoRows):
			res.Added++
		case err != nil:
			return res, fmt.Errorf("sqlitestore: %s: %w", a.Name, err)
		case bytes.Equal(old, a.Config):
			res.Unchanged++
			continue
		default:
			res.Changed++
		}
		hosts := lowerAll(a.App.Hosts)
		v, err := st.change(ctx, a.Name, hosts, now)
		if err != nil {
			return res, err
		}
		if _, err := st.putApp.ExecContext(ctx, a.Name, a.Config, v); err != nil {
			return res, fmt.Errorf("sqlitestore: %s: %w", a.Name, err)
		}
		if _, err := st.delRoutes.ExecContext(ctx, a.Name); err != nil {
			return res, fmt.Errorf("sqlitestore: %s: %w", a.Name, err)
		}
		for _, h := range hosts {
			for _, p := range a.App.Paths {
				var owner string
				switch err := st.routeOwner.QueryRowContext(ctx, h, p).Scan(&owner); {
				case err == nil:
					return res, fmt.Errorf("sqlitestore: apps.%s: host %s path %s is already claimed by app %s", a.Name, h, p, owner)
				case !errors.Is(err, sql.ErrNoRows):
					return res, fmt.Errorf("sqlitestore: %s: %w", a.Name, err)
				}
				if _, err := st.putRoute.ExecContext(ctx, h, p, a.Name); err != nil {
					return res, fmt.Errorf("sqlitestore: %s: %w", a.Name, err)
				}
			}
		}
	}
	if err := prune(ctx, tx); err != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("sqlitestore: %w", err)
	}
	return res, nil
}

// Delete removes the named apps (absent ones are ignored) and records a
// change for each removed one. It returns how many it removed.
func (s *Store) Delete(ctx context.Context, names []string, now time.Time) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %w", err)
	}
	defer tx.Rollback()
	st, err := prepare(ctx, tx)
	if err != nil {
		return 0, err
	}
	defer st.close()
	n := 0
	for _, name := range names {
		r, err := tx.ExecContext(ctx, `DELETE FROM apps WHERE name = ?`, name)
		if err != nil {
			return n, fmt.Errorf("sqlitestore: %s: %w", name, err)
		}
		if k, _ := r.RowsAffected(); k == 0 {
			continue
		}
		n++
		if _, err := st.delRoutes.ExecContext(ctx, name); err != nil {
			return n, fmt.Errorf("sqlitestore: %s: %w", name, err)
		}
		if _, err := st.change(ctx, name, nil, now); err != nil {
			return n, err
		}
	}
	if err := prune(ctx, tx); err != nil {
		return n, err
	}
	return n, tx.Commit()
}

type stmts struct {
	getConfig, putApp, delRoutes, routeOwner, putRoute, addChange *sql.Stmt
}

func prepare(ctx context.Context, tx *sql.Tx) (*stmts, error) {
	var st stmts
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.getConfig, `SELECT config FROM apps WHERE name = ?`},
		{&st.putApp, `INSERT INTO apps (name, config, version) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET config = excluded.config, version = excluded.version`},
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

func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.getConfig, st.putApp, st.delRoutes, st.routeOwner, st.putRoute, st.addChange} {
		if s != nil {
			s.Close()
		}
	}
}

// change records a write of app and returns its version.
func (st *stmts) change(ctx context.Context, app string, hosts []string, now time.Time) (int64, error) {
	r, err := st.addChange.ExecContext(ctx, app, strings.Join(hosts, "\n"), now.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: %s: %w", app, err)
	}
	return r.LastInsertId()
}

// prune keeps the last MaxChanges change rows.
func prune(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM changes WHERE version <= (SELECT MAX(version) FROM changes) - ?`, MaxChanges)
	if err != nil {
		return fmt.Errorf("sqlitestore: prune changes: %w", err)
	}
	return nil
}

func lowerAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}

// ReadImport reads an import file: YAML with an apps: section (name
// ending in .yaml or .yml) or JSONL, one app a line with its "name"
// beside its other keys. Every app is validated; any problem fails it all.
func ReadImport(name string, r io.Reader) ([]config.AppSource, error) {
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		return config.ParseAppsYAML(data)
	}
	var out []config.AppSource
	var errs config.Errors
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		a, err := config.ParseAppJSON(b, line)
		if err != nil {
			var es config.Errors
			if errors.As(err, &es) {
				errs = append(errs, es...)
			} else {
				errs = append(errs, config.FieldError{Path: fmt.Sprintf("line %d", line), Msg: err.Error()})
			}
			continue
		}
		if prev, ok := seen[a.Name]; ok {
			errs = append(errs, config.FieldError{Path: fmt.Sprintf("line %d", line), Msg: fmt.Sprintf("app %s is already on line %d", a.Name, prev)})
			continue
		}
		seen[a.Name] = line
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
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
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cfg, &m); err != nil {
			return n, fmt.Errorf("sqlitestore: app %s: stored config: %w", name, err)
		}
		m["name"], _ = json.Marshal(name)
		line, err := json.Marshal(m)
		if err != nil {
			return n, fmt.Errorf("sqlitestore: app %s: %w", name, err)
		}
		bw.Write(line)
		bw.WriteByte('\n')
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("sqlitestore: %w", err)
	}
	return n, bw.Flush()
}

// Stats describes a catalog file.
type Stats struct {
	Apps, Routes, Hosts, WildcardHosts int64
	Version                            int64 // of the latest change
	Changes                            int64 // change rows kept
	OldestChange                       int64
	Bytes                              int64 // file size (pages × page size)
}

// Stats counts the file's contents. It scans the routes index: seconds at
// millions of apps.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
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
