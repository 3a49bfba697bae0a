package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/topk"
	"github.com/leveeproxy/levee/internal/topview"
)

const topUsage = `Usage:
  levee top [--config FILE | --admin URL] [--app NAME] [--by requests|rejected|bytes|items]
            [--window 10s|1m|10m] [--interval 1s] [--once [--json]]

A terminal view of a running levee, read from its admin API: the apps, the
selected app's heaviest clients and its backends, redrawn every --interval.
Keys: q quit, j/k or the arrows select an app, b cycles --by, w --window.
--once prints one frame as plain text, --once --json one snapshot as JSON
(docs/admin.md, "levee top"); either exits 1 when the admin cannot be read.

`

// fetchTimeout bounds one snapshot's requests to the admin API.
const fetchTimeout = 5 * time.Second

// topOptions are levee top's flags, checked.
type topOptions struct {
	admin    string // the admin API's root URL
	query    topview.Query
	interval time.Duration
	once     bool
	json     bool
}

// topCmd runs `levee top`.
func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, cfgPath, err := topFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFlagsPrinted):
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "levee top: %v\n", err)
		return exitUsage
	}
	if opts.admin, err = topAdmin(opts.admin, cfgPath); err != nil {
		fmt.Fprintf(stderr, "levee top: %v\n", err)
		return 1
	}
	client := &topview.Client{Base: opts.admin, HTTP: &http.Client{Timeout: fetchTimeout}}
	if opts.once {
		return topOnce(ctx, client, opts, stdout, stderr)
	}
	return exitCode(topInteractive(ctx, client, opts, stdout), stderr)
}

// errFlagsPrinted is a flag error the flag package has already printed.
var errFlagsPrinted = errors.New("levee top: bad flags")

// topFlags parses levee top's flags; opts.admin is --admin as given, for
// topAdmin with the --config path returned.
func topFlags(args []string, stderr io.Writer) (opts topOptions, cfgPath string, err error) {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, topUsage); fs.PrintDefaults() }
	cfg := fs.String("config", "", "read the admin address from this levee config's admin.addr")
	admin := fs.String("admin", "", "the admin API's URL (default: the config's admin.addr, else "+config.DefaultAdmin+")")
	app := fs.String("app", "", "the app to show clients and backends of (default: the busiest)")
	by := fs.String("by", topk.ByRequests, "rank clients by: "+strings.Join(topk.Dimensions[:], ", "))
	window := fs.String("window", topk.WindowNames[0], "rank clients over: "+strings.Join(topk.WindowNames[:], ", "))
	interval := fs.Duration("interval", time.Second, "how often to refresh")
	once := fs.Bool("once", false, "print one frame (or with --json one snapshot) and exit")
	asJSON := fs.Bool("json", false, "with --once: print the snapshot as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return topOptions{}, "", err
		}
		return topOptions{}, "", errFlagsPrinted
	}
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %v", fs.Args())
	case *cfg != "" && *admin != "":
		err = errors.New("want --config or --admin, not both")
	case !slices.Contains(topk.Dimensions[:], *by):
		err = fmt.Errorf("--by must be one of %v", topk.Dimensions)
	case !slices.Contains(topk.WindowNames[:], *window):
		err = fmt.Errorf("--window must be one of %v", topk.WindowNames)
	case *interval < 100*time.Millisecond:
		err = errors.New("--interval must be at least 100ms")
	case *asJSON && !*once:
		err = errors.New("--json needs --once (for a stream, read GET /api/events)")
	}
	if err != nil {
		return topOptions{}, "", err
	}
	return topOptions{
		admin:    *admin,
		query:    topview.Query{App: *app, By: *by, Window: *window},
		interval: *interval,
		once:     *once,
		json:     *asJSON,
	}, *cfg, nil
}

// topAdmin is the admin API's root URL: --admin as given (http:// added
// to a bare host:port), or the config's admin.addr, or the default's.
func topAdmin(admin, cfgPath string) (string, error) {
	if admin != "" {
		if !strings.Contains(admin, "://") {
			admin = "http://" + admin
		}
		u, err := url.Parse(admin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--admin %q: want a URL such as http://127.0.0.1:9901", admin)
		}
		return strings.TrimSuffix(admin, "/"), nil
	}
	addr := config.DefaultAdmin
	if cfgPath != "" {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return "", fmt.Errorf("%s: %w", cfgPath, err)
		}
		addr = cfg.Admin.Addr
	}
	return adminURL(addr)
}

// adminURL is the URL that reaches a listener bound to addr from this
// host: an unspecified host (":9901", "0.0.0.0:9901") is loopback.
func adminURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin.addr %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if err == nil && ip.Is6() {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// topOnce prints one snapshot, as JSON or as a plain frame.
func topOnce(ctx context.Context, client *topview.Client, opts topOptions, stdout, stderr io.Writer) int {
	snap, err := client.Fetch(ctx, opts.query)
	if err != nil {
		fmt.Fprintf(stderr, "levee top: %v\n", err)
		return 1
	}
	if opts.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return exitCode(enc.Encode(snap), stderr)
	}
	view := topview.View{Admin: opts.admin, By: opts.query.By, Window: opts.query.Window}
	var b strings.Builder
	for _, line := range topview.Render(snap, view, 0, 0) {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	_, err = io.WriteString(stdout, b.String())
	return exitCode(err, stderr)
}

// topInteractive draws the view full-screen on stdout until q, or ctx
// ends (SIGINT, SIGTERM).
func topInteractive(ctx context.Context, client *topview.Client, opts topOptions, stdout io.Writer) error {
	out, ok := stdout.(*os.File)
	// term.IsTerminal, not drill's isTerminal: /dev/null is a character
	// device but no screen to draw on.
	if !ok || !term.IsTerminal(int(out.Fd())) {
		return errors.New("top: standard output is not a terminal; use --once, or --once --json")
	}
	ui := &topUI{
		client: client, opts: opts, out: out,
		sel: opts.query.App, by: opts.query.By, window: opts.query.Window,
	}
	return ui.run(ctx, os.Stdin)
}
