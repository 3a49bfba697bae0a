package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/leveeproxy/levee/internal/demo"
)

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "proxy listen address")
	adminAddr := fs.String("admin", "127.0.0.1:9901", "admin listen address")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "levee demo: unexpected argument %q\n\n%s", fs.Arg(0), usage)
		return exitUsage
	}
	d, err := demo.Start()
	if err != nil {
		return exitCode(err, stderr)
	}
	defer d.Close()
	// The config is a file, as for levee serve: reload reads it, and a second
	// levee started on it (levee drill duplicate-instance) meets the demo's
	// instance lock, kept beside it.
	dir, err := os.MkdirTemp("", "levee-demo-")
	if err != nil {
		return exitCode(err, stderr)
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "levee.yaml")
	data := fmt.Appendf(d.Config(*listen, *adminAddr), "instance: {lock: %q}\n", filepath.Join(dir, "levee.lock"))
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		return exitCode(err, stderr)
	}
	src := fileSource(cfgPath)
	printTry := func(proxy []net.Addr, admin net.Addr) {
		p, a := proxy[0].String(), admin.String()
		fmt.Fprintf(stdout, `
levee demo is running: apps "photos" and "api", three sample backends each
(and "tenant" and "drill" for levee drill, below).
  proxy  http://%[1]s
  admin  http://%[2]s  (/metrics, /healthz, /readyz, POST /reload)
  ui     http://%[2]s/ui/  (the dashboard, live)
  config %[4]s

Try:
  curl -H 'Host: photos.localhost' http://%[1]s/
  for i in $(seq 40); do curl -s -o /dev/null -w '%%{http_code}\n' -H 'Host: api.localhost' 'http://%[1]s/slow?ms=500' & done | sort | uniq -c
  curl -s http://%[2]s/metrics | grep -E '^levee_(requests|rejected)_total'

The second command overloads "api" (8 in flight, 8 queued for at most 100ms):
most requests are refused at once with 503, Retry-After and Levee-Reject.

Grade it against the incidents levee was built for (docs/drills.md):
  levee drill all --target http://%[1]s --host tenant.localhost --limit 100/s \
    --other-host photos.localhost --hot-host photos.localhost --cold-domain photos.localhost \
    --dist-host drill.localhost --backend-port %[3]d --config %[4]s
Ctrl-C to stop.
`, p, a, demo.DrillBackendPort, cfgPath)
	}
	return exitCode(serve(ctx, src, stdout, stderr, printTry), stderr)
}
