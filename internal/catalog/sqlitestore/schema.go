// Package sqlitestore keeps a catalog of apps in an SQLite file (pure Go,
// modernc.org/sqlite), for catalogs too large for the config file.
//
// The schema (version 1) is:
//
//	apps(name TEXT PRIMARY KEY, config TEXT, version INTEGER)
//	    config is the app's config as JSON, exactly the form of apps.NAME in
//	    the config file (hosts, paths, backends, limits, ...), validated by
//	    internal/config before it is written; version is the changes.version
//	    of the app's last write.
//	routes(host TEXT, path TEXT, app TEXT, PRIMARY KEY (host, path))
//	    one row per host × path pair the app claims, host in lower case
//	    ("*.example.com" for a wildcard): the lookup index. A pair belongs
//	    to one app at most.
//	changes(version INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT, hosts TEXT, at INTEGER)
//	    one row per write of an app (insert, update or delete), hosts being
//	    the app's hosts after it, one per line, and at the write's time in
//	    Unix nanoseconds; or, with app "@certificate", a note that the
//	    certificates of hosts were written (catalog.CertificateApp).
//	    Watchers poll it; the oldest rows are pruned past MaxChanges.
//	meta(key TEXT PRIMARY KEY, value TEXT)
//	    schema_version.
//
// The file is in WAL mode, so one writer (levee catalog import) and any
// number of readers (levee serve, opened read-only) work at once.
package sqlitestore

const schemaVersion = "1"

var schema = []string{
	`CREATE TABLE IF NOT EXISTS apps (
		name    TEXT PRIMARY KEY,
		config  TEXT NOT NULL,
		version INTEGER NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS routes (
		host TEXT NOT NULL,
		path TEXT NOT NULL,
		app  TEXT NOT NULL,
		PRIMARY KEY (host, path)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS routes_by_app ON routes (app)`,
	`CREATE TABLE IF NOT EXISTS changes (
		version INTEGER PRIMARY KEY AUTOINCREMENT,
		app     TEXT NOT NULL,
		hosts   TEXT NOT NULL,
		at      INTEGER NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS meta (
		key   TEXT PRIMARY KEY,
		value TEXT NOT NULL
	)`,
	`INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '` + schemaVersion + `')`,
}

// MaxChanges is how many change rows a write keeps; a watcher further
// behind than that forgets its cache and starts over.
const MaxChanges = 1_000_000
