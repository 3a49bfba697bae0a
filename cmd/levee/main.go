// Command levee is an HTTP edge proxy that keeps serving when offered more
// traffic than the system behind it can take.
//
//	levee serve --config FILE   run the proxy
//	levee check --config FILE   validate a config; exit 1 listing every problem
//	levee upgrade --config FILE replace the running levee without a gap
//	levee demo                  run levee in front of sample backends on loopback
//	levee drill NAME|all        replay an incident against an edge and grade it
//	levee catalog import|export|stats   manage an app catalog (SQLite or PostgreSQL)
//	levee top                   a live terminal view of a running levee
//	levee certs list|show|renew the ACME certificates of a running levee
//	levee version               print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/leveeproxy/levee/internal/admin"
	"github.com/leveeproxy/levee/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `levee: an HTTP edge proxy that keeps serving under overload

Usage:
  levee serve --config FILE   run the proxy
  levee check --config FILE   validate a config; exit 1 listing every problem
  levee upgrade --config FILE [--binary PATH]
                              replace the running levee by a new process on the
                              same sockets, lock and limits (levee upgrade --help)
  levee demo [--listen ADDR] [--admin ADDR]
                              run levee in front of sample backends on loopback
  levee drill NAME|all [flags]
                              replay an incident against an edge and grade it
                              (levee drill --help lists the drills)
  levee catalog import|export|stats (--db FILE | --config FILE) ...
                              manage an app catalog (SQLite or PostgreSQL) (levee catalog for help)
  levee top [--config FILE | --admin URL] [--app NAME] [--once [--json]]
                              a live terminal view of a running levee: apps,
                              refusals, top clients, backends (levee top --help)
  levee certs list|show NAME|renew NAME [--config FILE | --admin URL]
                              the ACME certificates of a running levee (levee certs for help)
  levee version               print the version
`

// exitUsage is the exit code for a command line levee cannot understand.
const exitUsage = 2

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// After the first signal starts the drain, restore the default action so
	// a second SIGINT or SIGTERM ends levee at once.
	go func() { <-ctx.Done(); stop() }()
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		path, ok := configFlag("serve", rest, stderr)
		if !ok {
			return exitUsage
		}
		return exitCode(serve(ctx, fileSource(path), stdout, stderr), stderr)
	case "check":
		path, ok := configFlag("check", rest, stderr)
		if !ok {
			return exitUsage
		}
		return check(ctx, path, stdout, stderr)
	case "upgrade":
		return upgradeCmd(ctx, rest, stdout, stderr)
	case "demo":
		return demoCmd(ctx, rest, stdout, stderr)
	case "drill":
		return drillCmd(ctx, rest, stdout, stderr)
	case "catalog":
		return catalogCmd(ctx, rest, stdout, stderr)
	case "top":
		return topCmd(ctx, rest, stdout, stderr)
	case "certs":
		return certsCmd(ctx, rest, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "levee: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

func configFlag(cmd string, args []string, stderr io.Writer) (string, bool) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path to the YAML config file")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "levee %s: want --config FILE\n", cmd)
		return "", false
	}
	return *path, true
}

func check(ctx context.Context, path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path)
	if err != nil {
		var errs config.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %d problem(s):\n", path, len(errs))
			for _, e := range errs {
				fmt.Fprintf(stderr, "  %s\n", e.Error())
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
		}
		return 1
	}
	if cfg.Catalog.On() {
		warnings, err := catalogWarnings(ctx, cfg)
		if err != nil {
			key := catalogSource{sqlite: cfg.Catalog.SQLite, postgres: cfg.Catalog.Postgres}.key()
			fmt.Fprintf(stderr, "%s: 1 problem(s):\n  %s: %v\n", path, key, err)
			return 1
		}
		for _, w := range warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", path, w)
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%d apps, %d listeners)\n", path, len(cfg.Apps), len(cfg.Listen))
	return 0
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "levee: %v\n", err)
	return 1
}

func versionString() string {
	b := buildInfo()
	s := "levee " + b.Version
	if b.Revision != "" {
		s += " (" + b.Revision
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s
}

// build is what the binary knows of its build, as the admin API shows it.
type build = admin.Build

func buildInfo() build {
	b := build{Version: version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			b.Revision = kv.Value
		case "vcs.modified":
			b.Modified = kv.Value == "true"
		}
	}
	return b
}
