package acme

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/leveeproxy/levee/internal/clock"
)

// Storage is certmagic's Storage on the catalog's database (the SQLite
// file or the PostgreSQL database of catalog:), in two tables of its own:
//
//	levee_acme_kv(key TEXT PRIMARY KEY, value BLOB, modified INTEGER)
//	    every value sealed (AES-256-GCM, seal.go) with the key file's key;
//	    modified in Unix nanoseconds.
//	levee_acme_locks(name TEXT PRIMARY KEY, owner TEXT, expires INTEGER)
//	    leases: one instance of a fleet issues or renews a name while the
//	    others wait, and a crashed holder's lease runs out.
//
// It is safe for concurrent use. Close closes its connections.
type Storage struct {
	db     *sql.DB
	rebind func(string) string // ? placeholders to the driver's
	seal   *sealer
	owner  string // this instance's lease holder id
	clk    clock.Clock
}

var (
	_ certmagic.Storage          = (*Storage)(nil)
	_ certmagic.TryLocker        = (*Storage)(nil)
	_ certmagic.LockLeaseRenewer = (*Storage)(nil)
)

// Lease timing: a lease outlives a holder that stopped renewing it by
// LockLease; a waiter looks again every lockPoll.
const (
	LockLease = 2 * time.Minute
	lockPoll  = time.Second
)

// keyCheck is the key of a sealed known value that proves, at open, that
// the key file is the one the store was written with.
const keyCheck = "levee/key-check"

var keyCheckValue = []byte("levee acme store key check v1")

// StorageOptions say where and how the store is kept.
type StorageOptions struct {
	// SQLite is the catalog file's path, or Postgres the catalog's DSN.
	SQLite, Postgres string
	// Key is tls.acme.key_file's key (config.ACMEKeyBytes bytes).
	Key   []byte
	Clock clock.Clock // nil: the real one
}

// OpenStorage opens the store, making its tables if needed, and checks
// that Key opens what is stored: a wrong key file is an error here, at
// start, never a certificate that fails to load later.
func OpenStorage(ctx context.Context, o StorageOptions) (*Storage, error) {
	seal, err := newSealer(o.Key)
	if err != nil {
		return nil, err
	}
	s := &Storage{seal: seal, clk: o.Clock, rebind: func(q string) string { return q }}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	id := make([]byte, 8)
	rand.Read(id)
	s.owner = hex.EncodeToString(id)
	blob, integer := "BLOB", "INTEGER"
	switch {
	case o.SQLite != "":
		s.db, err = sql.Open("sqlite", "file:"+(&url.URL{Path: o.SQLite}).EscapedPath()+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err == nil {
			s.db.SetMaxOpenConns(1) // one writer; more would only wait
		}
	case o.Postgres != "":
		s.db, err = sql.Open("pgx", o.Postgres)
		s.rebind, blob, integer = pgPlaceholders, "bytea", "bigint"
	default:
		return nil, errors.New("acme: storage: needs catalog.sqlite or catalog.postgres")
	}
	if err != nil {
		return nil, fmt.Errorf("acme: storage: %w", err)
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS levee_acme_kv (key TEXT PRIMARY KEY, value ` + blob + ` NOT NULL, modified ` + integer + ` NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS levee_acme_locks (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires ` + integer + ` NOT NULL)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			s.db.Close()
			return nil, fmt.Errorf("acme: storage: %w", err)
		}
	}
	if err := s.checkKey(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// pgPlaceholders numbers the ? placeholders of q for PostgreSQL.
func pgPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *Storage) checkKey(ctx context.Context) error {
	v, err := s.Load(ctx, keyCheck)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s.Store(ctx, keyCheck, keyCheckValue)
	case errors.Is(err, errUnsealed):
		return errors.New("acme: tls.acme.key_file is not the key the stored certificates were written with " +
			"(the catalog's ACME store opens only with that key)")
	case err != nil:
		return err
	case string(v) != string(keyCheckValue):
		return errors.New("acme: the store's key check holds an unexpected value")
	}
	return nil
}

// Close closes the store's connections.
func (s *Storage) Close() error { return s.db.Close() }

func (s *Storage) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	r, err := s.db.ExecContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("acme: storage: %w", err)
	}
	return r, nil
}

// Store seals value and writes it at key.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	_, err := s.exec(ctx, `INSERT INTO levee_acme_kv (key, value, modified) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, modified = excluded.modified`,
		key, s.seal.seal(key, value), s.clk.Now().UnixNano())
	return err
}

// Load reads and opens the value at key; fs.ErrNotExist when there is none.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT value FROM levee_acme_kv WHERE key = ?`), key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("acme: storage: %w", err)
	}
	return s.seal.open(key, v)
}

// Delete removes key and every key under it (key/...).
func (s *Storage) Delete(ctx context.Context, key string) error {
	_, err := s.exec(ctx, `DELETE FROM levee_acme_kv WHERE key = ? OR substr(key, 1, ?) = ?`,
		key, len(key)+1, key+"/")
	return err
}

// Exists reports whether a value is at key.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	var one int
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT 1 FROM levee_acme_kv WHERE key = ?`), key).Scan(&one)
	return err == nil
}

// List returns the keys under prefix: all of them when recursive, else
// its direct children (a child that holds keys counts once).
func (s *Storage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	dir := strings.TrimSuffix(prefix, "/") + "/"
	if prefix == "" {
		dir = ""
	}
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT key FROM levee_acme_kv WHERE substr(key, 1, ?) = ? ORDER BY key`),
		len(dir), dir)
	if err != nil {
		return nil, fmt.Errorf("acme: storage: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("acme: storage: %w", err)
		}
		if k == keyCheck {
			continue
		}
		if !recursive {
			rest := k[len(dir):]
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				k = dir + rest[:i]
			}
			if len(out) > 0 && out[len(out)-1] == k {
				continue
			}
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("acme: storage: %w", err)
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	return slices.Compact(out), nil
}

// Stat describes key: a value (terminal), a prefix of values, or
// fs.ErrNotExist.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	var v []byte
	var mod int64
	err := s.db.QueryRowContext(ctx, s.rebind(`SELECT value, modified FROM levee_acme_kv WHERE key = ?`), key).Scan(&v, &mod)
	switch {
	case err == nil:
		return certmagic.KeyInfo{Key: key, Modified: time.Unix(0, mod), Size: int64(len(v)), IsTerminal: true}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return certmagic.KeyInfo{}, fmt.Errorf("acme: storage: %w", err)
	}
	if _, err := s.List(ctx, key, false); err != nil {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key}, nil
}

// TryLock takes the lease on name when it is free or its holder's ran out.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	now := s.clk.Now()
	r, err := s.exec(ctx, `INSERT INTO levee_acme_locks (name, owner, expires) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
		WHERE levee_acme_locks.expires < ?`,
		name, s.owner, now.Add(LockLease).UnixNano(), now.UnixNano())
	if err != nil {
		return false, err
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

// Lock waits until it holds the lease on name, or ctx ends (then it
// returns ctx's error, holding nothing).
func (s *Storage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if ok || err != nil {
			return err
		}
		t := s.clk.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// Unlock gives the lease on name back, if this instance holds it.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	_, err := s.exec(ctx, `DELETE FROM levee_acme_locks WHERE name = ? AND owner = ?`, name, s.owner)
	return err
}

// RenewLockLease extends this instance's lease on name by d.
func (s *Storage) RenewLockLease(ctx context.Context, name string, d time.Duration) error {
	r, err := s.exec(ctx, `UPDATE levee_acme_locks SET expires = ? WHERE name = ? AND owner = ?`,
		s.clk.Now().Add(d).UnixNano(), name, s.owner)
	if err != nil {
		return err
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fmt.Errorf("acme: storage: the lease on %s is not held", name)
	}
	return nil
}
