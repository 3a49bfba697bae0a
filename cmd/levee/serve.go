package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/admin"
	"github.com/leveeproxy/levee/internal/config"
	"github.com/leveeproxy/levee/internal/observe"
	"github.com/leveeproxy/levee/internal/sdnotify"
	"github.com/leveeproxy/levee/internal/server"
)

// source loads the config, at start and on every reload; a load returns
// once ctx ends, whatever it was reading.
type source struct {
	load func(ctx context.Context) (*config.Config, error)
	// path is the config file, from which the instance lock is derived;
	// empty for a config that is not a file (the demo), which takes no lock.
	path string
}

// fileSource reads the config file, and every file it names, through one
// config.Files for the process's life: each read is bounded in size and
// time, and a file on a stalled filesystem costs one goroutine however many
// reloads ask for it.
func fileSource(path string) source {
	files := new(config.Files)
	return source{load: func(ctx context.Context) (*config.Config, error) { return files.Load(ctx, path) }, path: path}
}

// started is told the bound addresses once levee serves (the demo prints them).
type started func(proxy []net.Addr, admin net.Addr)

// serve runs levee until ctx is done, then drains. SIGHUP and POST /reload
// reload the config from src; a bad one is refused and the old one serves on.
// A reload in progress when ctx ends is refused at once (its load returns),
// so nothing it holds keeps the drain waiting.
func serve(ctx context.Context, src source, stdout, stderr io.Writer, onStart ...started) (err error) {
	h, err := newHandover()
	if err != nil {
		return err
	}
	// A levee started by an upgrade that cannot serve says why to the old
	// one, which serves on.
	defer func() { h.failed(err) }()
	cfg, err := src.load(ctx)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	// Every line goes through one bounded queue and one writer goroutine,
	// so a slow or blocked stderr drops lines (counted) instead of stalling
	// requests, or pinning an OS thread per blocked write.
	out := observe.NewLogWriter(stderr, observe.DefaultLogWriterLimits)
	out.Start()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), logFlushTimeout)
		defer cancel()
		_ = out.Close(ctx) // a stderr blocked past it keeps what it has not taken
	}()
	log := newLogger(cfg.Log, level, out)
	// The lock comes before any socket: a refused instance binds nothing.
	// It is held until serve returns, after the drain (see docs/deploy.md).
	guard, err := lockInstance(cfg, src.path, h.inheritedLock(), log)
	if err != nil {
		return err
	}
	defer guard.release()
	// The access log is the server's JSON lines into out (Options.AccessLog).
	opts := server.Options{Logger: log, LogLevel: level, LogOutput: out, Listen: h.proxyListen}
	st, closeStore, err := openServeCatalog(ctx, cfg.Catalog, log)
	if err != nil {
		return err
	}
	if st != nil {
		defer closeStore()
		opts.Catalog = st
	}
	certs, closeACME, err := openACME(ctx, cfg, opts.Catalog, log)
	if err != nil {
		return err
	}
	defer closeACME()
	var adminCerts admin.Certs // nil unless tls.acme is on
	if certs != nil {
		opts.ACME, adminCerts = certs.mgr, certs
	}
	srv := server.New(cfg, opts)
	// Every return below releases what New and Listen took: a start that
	// fails part way leaks no socket or goroutine. After Serve, a no-op.
	defer srv.Close()
	if guard.unexpected {
		srv.SetUnexpected(true)
	}
	// Validation proved the token file holds a token, but it may have changed since.
	token, err := cfg.Admin.Token()
	if err != nil {
		return err
	}
	notify := sdnotify.FromEnv()
	if err := srv.Listen(); err != nil {
		return err
	}
	if opts.ACME != nil {
		if err := opts.ACME.Start(srv.ACMEListeners()); err != nil {
			return err
		}
	}
	adminLn, err := h.adminListen(cfg.Admin.Addr)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", cfg.Admin.Addr, err)
	}
	// Its own cap, so admin clients never hold the descriptors the proxy needs.
	adminLn = admin.LimitListener(adminLn, admin.MaxConns)
	// Started by an upgrade: the old levee's state, once it stops accepting.
	if err := h.takeOver(ctx, srv, log); err != nil {
		adminLn.Close()
		return err
	}

	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	var reloadMu sync.Mutex // one reload at a time, from SIGHUP or the API
	reload := func(trigger string) error {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		_ = notify.Reloading()
		defer func() { _ = notify.Ready(guard.status()) }() // the old or the new config serves
		next, err := src.load(serveCtx)
		if err == nil {
			err = srv.Reload(next)
		} else {
			srv.Metrics().Reload(false)
		}
		if err != nil {
			log.Error("reload refused; the previous config keeps serving", "trigger", trigger, "err", err)
			return err
		}
		log.Info("config reloaded", "trigger", trigger, "apps", len(next.Apps))
		return nil
	}
	up := &upgrader{h: h, srv: srv, guard: guard, notify: notify, log: log, stop: stopServing, drained: make(chan struct{})}
	upgradeNow := func(trigger, binary string) (int, error) {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		return up.run(serveCtx, trigger, binary)
	}

	var ready atomic.Bool
	adminSrv := admin.NewServer(admin.Handler(admin.Options{
		Registry: srv.Metrics().Registry,
		Ready:    ready.Load,
		Reload:   func() error { return reload("api") },
		Upgrade:  func(binary string) (int, error) { return upgradeNow("api", binary) },
		App:      srv.Table().AppStats,
		Addr:     cfg.Admin.Addr,
		Token:    token,
		Pprof:    cfg.Admin.Pprof,
		API:      liveAPI{srv: srv, config: src.path},
		Done:     serveCtx.Done(),
		Certs:    adminCerts,
	}), slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	var tasks sync.WaitGroup
	tasks.Go(func() {
		if err := adminSrv.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener failed", "err", err)
		}
	})

	hup, usr2 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(hup)
	defer signal.Stop(usr2)
	// Ready before the loop below starts, so its Store(false) on shutdown
	// always comes after: a signal during startup must not leave us ready.
	ready.Store(true)
	tasks.Go(func() {
		for {
			select {
			case <-hup:
				_ = reload("SIGHUP")
			case <-usr2:
				_, _ = upgradeNow("SIGUSR2", "")
			case <-serveCtx.Done():
				ready.Store(false) // load balancers stop sending while we drain
				if !up.handedOver() {
					_ = notify.Stopping()
				}
				return
			}
		}
	})

	if guard.unexpected {
		tasks.Go(func() { guard.takeOver(serveCtx, srv, log) })
	}
	log.Info("levee serving", "listen", srv.Addrs(), "admin", adminLn.Addr().String(), "apps", len(cfg.Apps),
		"role", guard.role(), "pid", os.Getpid())
	if h.in == nil {
		_ = notify.Ready(guard.status()) // after an upgrade, the old levee says it, with MAINPID
	}
	for _, f := range onStart {
		f(srv.Addrs(), adminLn.Addr())
	}
	h.serving(guard, log)
	if h.in != nil {
		// ctx, not serveCtx: the old levee's reports outlive this one's
		// own handover (three generations alive), and are passed on.
		tasks.Go(func() { h.reports(ctx, srv, log) })
	}
	err = srv.Serve(serveCtx)
	// The old levee's requests, if it still drains, count here until it
	// exits; a levee this one handed over to hears of them until then.
	h.awaitReports()
	up.finish()
	log.Info("levee stopped", "err", err)
	stopServing()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = adminSrv.Shutdown(shutdownCtx)
	tasks.Wait()
	return err
}

// logFlushTimeout bounds the wait for the log's last lines at exit.
const logFlushTimeout = 2 * time.Second

func newLogger(c config.Log, level *slog.LevelVar, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
