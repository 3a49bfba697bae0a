package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/instance"
)

const upgradeUsage = `Usage:
  levee upgrade --config FILE [--binary PATH] [--admin URL] [--timeout 60s]

Replaces the levee serving FILE with a new process, of the same binary as
now on disk or of --binary, on the same sockets and instance lock, with
its limits' state (docs/deploy.md, "Upgrades"). It waits for the outcome:
exit 0 once the new levee serves, 1 if the upgrade failed (the old levee
then serves on, and the reason is printed).

It asks the admin API (POST /upgrade, with admin.token_file's token) when
admin.addr has a port, or --admin names it; otherwise it sends SIGUSR2 to
the PID in the instance lock and waits for the lock to name a new one.
`

// upgradeCmd is `levee upgrade`.
func upgradeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, upgradeUsage); fs.PrintDefaults() }
	cfgPath := fs.String("config", "", "the config file of the levee to upgrade")
	binary := fs.String("binary", "", "the new levee binary (default: the running one's path)")
	admin := fs.String("admin", "", "the admin API's URL (default: the config's admin.addr)")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for the new levee to serve")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, "levee upgrade: want --config FILE\n")
		return exitUsage
	}
	if *binary != "" {
		abs, err := filepath.Abs(*binary)
		if err != nil {
			fmt.Fprintf(stderr, "levee upgrade: --binary: %v\n", err)
			return exitUsage
		}
		*binary = abs
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "levee upgrade: %s: %v\n", *cfgPath, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var pid int
	if _, port, _ := net.SplitHostPort(cfg.Admin.Addr); *admin != "" || port != "0" {
		pid, err = upgradeByAPI(ctx, cfg, *admin, *binary)
	} else if *binary != "" {
		err = errors.New("--binary needs the admin API: admin.addr with a fixed port, or --admin")
	} else {
		pid, err = upgradeBySignal(ctx, cfg, *cfgPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "levee upgrade: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "levee upgraded: process %d serves\n", pid)
	return 0
}

// upgradeByAPI asks the admin API and returns the new levee's PID.
func upgradeByAPI(ctx context.Context, cfg *config.Config, admin, binary string) (int, error) {
	base, err := topAdmin(admin, "")
	if admin == "" {
		base, err = adminURL(cfg.Admin.Addr)
	}
	if err != nil {
		return 0, err
	}
	token, err := cfg.Admin.Token()
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(map[string]string{"binary": binary})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/upgrade", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		OK    bool   `json:"ok"`
		PID   int    `json:"pid"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return 0, fmt.Errorf("admin API: %s: %w", resp.Status, err)
	}
	if !out.OK {
		return 0, fmt.Errorf("%s (the old levee serves on)", out.Error)
	}
	return out.PID, nil
}

// upgradeEvery is how often the signal path reads the lock file.
const upgradeEvery = 50 * time.Millisecond

// upgradeBySignal sends SIGUSR2 to the lock's holder and waits for the
// lock to name another process. It cannot hear why an upgrade failed:
// the levee's log says.
func upgradeBySignal(ctx context.Context, cfg *config.Config, cfgPath string) (int, error) {
	path := cfg.Instance.Lock
	if path == "" {
		var err error
		if path, err = instance.DefaultPath(cfgPath); err != nil {
			return 0, err
		}
	}
	old := instance.HolderPID(path)
	if old == 0 {
		return 0, fmt.Errorf("no levee named in the instance lock %s", path)
	}
	if l, err := instance.TryAcquire(path); err == nil {
		l.Release()
		return 0, fmt.Errorf("no levee holds the instance lock %s (process %d has gone)", path, old)
	}
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return 0, fmt.Errorf("signal process %d: %w", old, err)
	}
	t := time.NewTicker(upgradeEvery)
	defer t.Stop()
	for {
		if pid := instance.HolderPID(path); pid != 0 && pid != old {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no new levee took the instance lock %s before the timeout; the levee's log says why (process %d serves on)", path, old)
		case <-t.C:
		}
	}
}
