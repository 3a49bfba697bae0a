package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/catalog/sqlitestore"
	"github.com/leveeproxy/levee/internal/config"
)

const catalogUsage = `Usage:
  levee catalog import (--db FILE | --config FILE) APPS.yaml|APPS.jsonl
                        add or update the apps of a YAML file (an apps: section)
                        or a JSONL file (one app a line, with its "name")
  levee catalog export (--db FILE | --config FILE)
                        write every app as JSONL to standard output
  levee catalog stats  (--db FILE | --config FILE)
                        count the apps, routes and changes of the file
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
	cfgPath := fs.String("config", "", "a levee config whose catalog.sqlite names the file")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	path, err := catalogPath(*db, *cfgPath)
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
		return exitCode(catalogImport(ctx, path, fs.Arg(0), stdout, stderr), stderr)
	case "export", "stats":
		if fs.NArg() != 0 {
			fmt.Fprintf(stderr, "levee catalog %s: unexpected arguments %v\n", sub, fs.Args())
			return exitUsage
		}
		st, err := sqlitestore.Open(path, sqlitestore.Options{Conns: 1})
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

func catalogPath(db, cfgPath string) (string, error) {
	switch {
	case db != "" && cfgPath != "":
		return "", errors.New("want --db or --config, not both")
	case db != "":
		return db, nil
	case cfgPath != "":
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return "", err
		}
		if cfg.Catalog.SQLite == "" {
			return "", fmt.Errorf("%s sets no catalog.sqlite", cfgPath)
		}
		return cfg.Catalog.SQLite, nil
	}
	return "", errors.New("want --db FILE or --config FILE")
}

func catalogImport(ctx context.Context, path, file string, stdout, stderr io.Writer) error {
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
	st, err := sqlitestore.Create(path)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.Put(ctx, apps, time.Now())
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %w", file, err)
	}
	fmt.Fprintf(stdout, "%s: %d added, %d changed, %d unchanged\n", path, res.Added, res.Changed, res.Unchanged)
	return nil
}

func catalogStats(ctx context.Context, st *sqlitestore.Store, w io.Writer) error {
	s, err := st.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "apps            %d\nroutes          %d\nhosts           %d (%d wildcards)\nversion         %d\nchanges kept    %d (from version %d)\nfile bytes      %d\n",
		s.Apps, s.Routes, s.Hosts, s.WildcardHosts, s.Version, s.Changes, s.OldestChange, s.Bytes)
	return nil
}

// catalogWarnings opens the config's catalog file and lists what the
// config file's apps shadow in it: the same app name, or the same host and
// path. The config file wins both; these are warnings, not errors.
func catalogWarnings(ctx context.Context, cfg *config.Config) ([]string, error) {
	st, err := sqlitestore.Open(cfg.Catalog.SQLite, sqlitestore.Options{Conns: 1})
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
