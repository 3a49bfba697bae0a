package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/catalog/pgstore"
	"github.com/leveeproxy/levee/internal/catalog/sqlitestore"
	"github.com/leveeproxy/levee/internal/config"
)

const catalogUsage = `Usage:
  levee catalog import (--db FILE | --postgres DSN | --config FILE) APPS.yaml|APPS.jsonl
                        add or update the apps of a YAML file (an apps: section)
                        or a JSONL file (one app a line, with its "name")
  levee catalog export (--db FILE | --postgres DSN | --config FILE)
                        write every app as JSONL to standard output
  levee catalog stats  (--db FILE | --postgres DSN | --config FILE)
                        count the apps, routes and changes of the catalog
`

// catalogCmd runs `levee catalog SUBCOMMAND`.
func catalogCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, catalogUsage)
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("catalog "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "path of the catalog file")
	dsn := fs.String("postgres", "", "DSN of the catalog database")
	cfgPath := fs.String("config", "", "a levee config whose catalog.sqlite or catalog.postgres names the catalog")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	src, err := catalogSourceOf(*db, *dsn, *cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "levee catalog %s: %v\n", sub, err)
		return exitUsage
	}
	switch sub {
	case "import":
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "levee catalog import: want one file\n\n%s", catalogUsage)
			return exitUsage
		}
		return exitCode(catalogImport(ctx, src, fs.Arg(0), stdout, stderr), stderr)
	case "export", "stats":
		if fs.NArg() != 0 {
			fmt.Fprintf(stderr, "levee catalog %s: unexpected arguments %v\n", sub, fs.Args())
			return exitUsage
		}
		st, err := openCatalog(ctx, src, false)
		if err != nil {
			return exitCode(err, stderr)
		}
		defer st.Close()
		if sub == "export" {
			_, err = st.Export(ctx, stdout)
			return exitCode(err, stderr)
		}
		return exitCode(catalogStats(ctx, st, stdout), stderr)
	}
	fmt.Fprintf(stderr, "levee catalog: unknown subcommand %q\n\n%s", sub, catalogUsage)
	return exitUsage
}

// catalogSource names a catalog store: an SQLite file or a PostgreSQL
// DSN, as catalog.sqlite and catalog.postgres do (one of them).
type catalogSource struct {
	sqlite, postgres string
}

func catalogSourceOf(db, dsn, cfgPath string) (catalogSource, error) {
	if len(slices.DeleteFunc([]string{db, dsn, cfgPath}, func(f string) bool { return f == "" })) > 1 {
		return catalogSource{}, errors.New("want one of --db, --postgres or --config")
	}
	switch {
	case db != "" || dsn != "":
		if dsn != "" {
			if err := pgstore.ParseDSN(dsn); err != nil {
				return catalogSource{}, fmt.Errorf("--postgres: %w", err)
			}
		}
		return catalogSource{sqlite: db, postgres: dsn}, nil
	case cfgPath != "":
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return catalogSource{}, err
		}
		if !cfg.Catalog.On() {
			return catalogSource{}, fmt.Errorf("%s sets no catalog.sqlite or catalog.postgres", cfgPath)
		}
		return catalogSource{sqlite: cfg.Catalog.SQLite, postgres: cfg.Catalog.Postgres}, nil
	}
	return catalogSource{}, errors.New("want --db FILE, --postgres DSN or --config FILE")
}

// key is the config key of the source, for messages.
func (c catalogSource) key() string {
	if c.postgres != "" {
		return "catalog.postgres"
	}
	return "catalog.sqlite"
}

// String names the source in messages: the file, or the database (never
// the DSN, which may hold a password).
func (c catalogSource) String() string {
	if c.postgres == "" {
		return c.sqlite
	}
	if pc, err := pgconn.ParseConfig(c.postgres); err == nil {
		return "postgres database " + pc.Database
	}
	return "postgres database"
}

// catalogDB is a catalog store as levee catalog and levee check use it.
type catalogDB interface {
	catalog.Store
	Put(ctx context.Context, apps []config.AppSource, now time.Time) (catalog.PutResult, error)
	Export(ctx context.Context, w io.Writer) (int, error)
	Stats(ctx context.Context) (catalog.StoreStats, error)
	Close() error
}

// openCatalog opens src for reading (it must hold a catalog) or, with
// write, for writing (making the catalog if needed).
func openCatalog(ctx context.Context, src catalogSource, write bool) (catalogDB, error) {
	if src.postgres == "" {
		if write {
			return sqlitestore.Create(src.sqlite)
		}
		return sqlitestore.Open(src.sqlite, sqlitestore.Options{Conns: 1})
	}
	st, err := pgstore.Open(src.postgres, pgstore.Options{Conns: 1})
	if err != nil {
		return nil, err
	}
	if write {
		err = st.Init(ctx)
	} else {
		err = st.Check(ctx)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// serveCatalogCheck bounds levee serve's first look at a catalog database.
const serveCatalogCheck = 5 * time.Second

// openServeCatalog opens the store of cfg for levee serve (nil when there
// is none), with one connection per concurrent load and one for the
// watcher. A catalog database that is unreachable at start is not fatal:
// the config file's apps are served, cold catalog hosts answer 503
// catalog-unavailable until it is back, and the pool reconnects.
func openServeCatalog(ctx context.Context, cfg config.Catalog, log *slog.Logger) (catalog.Store, func() error, error) {
	conns := cfg.Loader.Concurrency + 1
	switch {
	case cfg.SQLite != "":
		// Read-only.
		st, err := sqlitestore.Open(cfg.SQLite, sqlitestore.Options{Conns: conns})
		if err != nil {
			return nil, nil, fmt.Errorf("catalog.sqlite: %w", err)
		}
		return st, st.Close, nil
	case cfg.Postgres != "":
		st, err := pgstore.Open(cfg.Postgres, pgstore.Options{Conns: conns, Log: log})
		if err != nil {
			return nil, nil, fmt.Errorf("catalog.postgres: %w", err)
		}
		cctx, cancel := context.WithTimeout(ctx, serveCatalogCheck)
		defer cancel()
		switch err := st.Check(cctx); {
		case errors.Is(err, catalog.ErrUnavailable):
			log.Warn("catalog.postgres: the database is unreachable; serving the config file's apps, cold catalog hosts get 503 until it is back", "err", err)
		case err != nil:
			st.Close()
			return nil, nil, fmt.Errorf("catalog.postgres: %w", err)
		default:
			st.Warm(cctx)
		}
		return st, st.Close, nil
	}
	return nil, nil, nil
}

func catalogImport(ctx context.Context, src catalogSource, file string, stdout, stderr io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	apps, err := config.ReadImport(file, f)
	if err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %d problem(s), nothing imported:\n", file, len(errs))
			for _, e := range errs {
				fmt.Fprintf(stderr, "  %s\n", e.Error())
			}
			return errors.New("import refused")
		}
		return fmt.Errorf("%s: %w", file, err)
	}
	st, err := openCatalog(ctx, src, true)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.Put(ctx, apps, time.Now())
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %w", file, err)
	}
	fmt.Fprintf(stdout, "%s: %d added, %d changed, %d unchanged\n", src, res.Added, res.Changed, res.Unchanged)
	return nil
}

func catalogStats(ctx context.Context, st catalogDB, w io.Writer) error {
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "apps            %d\nroutes          %d\nhosts           %d (%d wildcards)\nversion         %d\nchanges kept    %d (from version %d)\nbytes on disk   %d\n",
		s.Apps, s.Routes, s.Hosts, s.WildcardHosts, s.Version, s.Changes, s.OldestChange, s.Bytes)
	return nil
}

// catalogWarnings opens the config's catalog and lists what the config
// file's apps shadow in it: the same app name, or the same host and path.
// The config file wins both; these are warnings, not errors.
func catalogWarnings(ctx context.Context, cfg *config.Config) ([]string, error) {
	st, err := openCatalog(ctx, catalogSource{sqlite: cfg.Catalog.SQLite, postgres: cfg.Catalog.Postgres}, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []string
	names := cfg.AppNames()
	same, err := st.Apps(ctx, names)
	if err != nil {
		return nil, err
	}
	for _, r := range same {
		out = append(out, fmt.Sprintf("apps.%s: the catalog also has an app named %s; the config file's is used", r.Name, r.Name))
	}
	for _, name := range names {
		ac := cfg.Apps[name]
		for _, h := range ac.Hosts {
			recs, err := st.ForHost(ctx, catalog.CanonicalHost(h))
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				if r.Name == name || !slices.Contains(r.Hosts, strings.ToLower(h)) {
					continue
				}
				for _, p := range ac.Paths {
					if slices.Contains(r.Paths, p) {
						out = append(out, fmt.Sprintf("apps.%s: host %s path %s is also claimed by catalog app %s; the config file wins", name, h, p, r.Name))
					}
				}
			}
		}
	}
	return out, nil
}
