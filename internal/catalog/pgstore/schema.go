// Package pgstore keeps a catalog of apps in PostgreSQL (pgx), for a fleet
// of levee instances that share one catalog. Its semantics are those of
// sqlitestore, table for table; what differs is how a change reaches the
// instances: every write also sends NOTIFY levee_catalog, which a watcher
// listening on its own connection turns into an immediate poll (Listen);
// the periodic poll stays, so a lost notice delays a change, never loses it.
//
// The schema (version 1) is:
//
//	apps(name text PRIMARY KEY, config text, version bigint)
//	    config is the app's config as JSON, exactly the form of apps.NAME in
//	    the config file, validated by internal/config before it is written;
//	    version is the changes.version of the app's last write.
//	routes(host text, path text, app text, PRIMARY KEY (host, path))
//	    one row per host × path pair the app claims, host in lower case
//	    ("*.example.com" for a wildcard): the lookup index, with an index
//	    on app. A pair belongs to one app at most.
//	changes(version bigint identity PRIMARY KEY, app text, hosts text[], at timestamptz)
//	    one row per write of an app (insert, update or delete), hosts being
//	    the app's hosts after it; or, with app "@certificate", a note that
//	    the certificates of hosts were written (catalog.CertificateApp).
//	    Writers hold an exclusive lock on it for
//	    their transaction, so versions commit in the order they are
//	    numbered and a watcher reading "after v" misses none. The oldest
//	    rows are pruned past MaxChanges.
//	meta(key text PRIMARY KEY, value text)
//	    schema_version.
//
// The tables are made by Init (levee catalog import) in the DSN's
// database and schema (its search_path), ideally levee's own.
package pgstore

// Channel is the NOTIFY channel of catalog writes; the payload is the
// version written.
const Channel = "levee_catalog"

// MaxChanges is how many change rows a write keeps; a watcher further
// behind than that forgets its cache and starts over.
const MaxChanges = 1_000_000

// migrations[i] takes the schema from version i to i+1.
var migrations = [][]string{
	{
		`CREATE TABLE apps (
			name    text PRIMARY KEY,
			config  text NOT NULL,
			version bigint NOT NULL
		)`,
		`CREATE TABLE routes (
			host text NOT NULL,
			path text NOT NULL,
			app  text NOT NULL,
			PRIMARY KEY (host, path)
		)`,
		`CREATE INDEX routes_by_app ON routes (app)`,
		`CREATE TABLE changes (
			version bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			app     text NOT NULL,
			hosts   text[] NOT NULL,
			at      timestamptz NOT NULL
		)`,
	},
}

// schemaVersion is the version this levee reads and writes.
var schemaVersion = len(migrations)

// schemaLock is the advisory lock Init holds: two imports making the
// schema at once take turns.
const schemaLock = 0x6c65766565 // "levee"
