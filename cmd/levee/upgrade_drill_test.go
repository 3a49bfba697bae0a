package main

// The upgrade drill (internal/drill) graded on levee's own upgrade, and the
// issue's open-loop acceptance test built on the same engine.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/drill"
	"github.com/leveeproxy/levee/internal/drill/drilltest"
	"github.com/leveeproxy/levee/internal/testcert"
)

// upgradeCommand is `levee upgrade` for u, through its admin API.
func (u *upgradeLevee) upgradeCommand() string {
	return fmt.Sprintf("'%s' upgrade --config '%s' --admin '%s'", leveeBin, u.config, u.admin)
}

// upgradeDrillConfig routes a.test (with extra under it) and b.test,
// limited to limit per second, to the drill's backend at backend.
func upgradeDrillExtra(backend, extra string, limit int) string {
	return fmt.Sprintf("%s  b:\n    hosts: [b.test]\n    backends: [%s]\n    limits: {rate: %d/s}\n", extra, backend, limit)
}

// `levee drill upgrade` passes levee's own upgrade, run from the command
// line: no refused, reset or truncated answer, and b.test's 100/s kept.
func TestUpgradeDrillPassesAgainstLevee(t *testing.T) {
	skipDrillOnEngineRerun(t)
	port := freePort(t)
	backend := fmt.Sprintf("127.0.0.1:%d", port)
	u := startUpgradable(t, backend, upgradeDrillExtra(backend, "", 100))
	code, card, stderr := runDrill(t, "upgrade", "--target", u.proxy, "--host", "a.test", "--command", u.upgradeCommand(),
		"--runs", "2", "--upgrade-rate", "100/s", "--upgrade-port", strconv.Itoa(port), "--limit-host", "b.test",
		"--limit", "100/s", "--timeout", "15s")
	if code != 0 || card.Verdict != "pass" {
		u.fatalf("exit %d, card %+v; want 0, pass\nstderr:\n%s", code, card, stderr)
	}
	u.upgraded(2)
	for _, name := range []string{"command succeeded every run", "no connection refused", "no connection reset",
		"no truncated response", "every request answered normally or refused by a limit", "admitted per window spanning a run"} {
		if pass, found := card.check("upgrade", name); !pass || !found {
			t.Errorf("check %q: pass %v, found %v", name, pass, found)
		}
	}
}

// An edge whose reload closes its listening socket and opens it again
// 300 ms later fails the drill, with exit 1, for the refused connections.
func TestUpgradeDrillFailsADroppingEdge(t *testing.T) {
	skipDrillOnEngineRerun(t)
	port := freePort(t)
	edge := drilltest.StartEdge(t, drilltest.EdgeOptions{})
	edge.SetUpstream(fmt.Sprintf("127.0.0.1:%d", port))
	command := drilltest.ReloadCommand(t, func() { edge.DropListener(300 * time.Millisecond) })
	code, card, stderr := runDrill(t, "upgrade", "--target", edge.URL, "--host", "a.test", "--command", command,
		"--runs", "1", "--upgrade-rate", "100/s", "--upgrade-port", strconv.Itoa(port), "--timeout", "15s")
	if pass, found := card.check("upgrade", "no connection refused"); code != 1 || card.Verdict != "fail" || !found || pass {
		t.Fatalf("exit %d, card %+v; want 1, fail on refused connections\nstderr:\n%s", code, card, stderr)
	}
	for _, d := range card.Drills {
		for _, c := range d.Checks {
			if c.Name == "no connection refused" && !strings.Contains(c.Got, "run 1:") {
				t.Fatalf("refused: %q; want the run that caused them named", c.Got)
			}
		}
	}
}

// reportCheck is r's check named name, nil if it has none.
func reportCheck(r *drill.Report, name string) *drill.Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// envInt reads a positive integer from the environment, def otherwise.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestUpgradeOpenLoop is issue 22's acceptance test, on the upgrade
// drill's open-loop load (one request in four on a fresh connection):
// LEVEE_TEST_UPGRADES upgrades in a row (3 by default) under
// LEVEE_TEST_UPGRADE_RATE requests per second to app a (50), beside 1.5x
// its limit to app b, limited to LEVEE_TEST_UPGRADE_LIMIT per second
// (50): light, as the race detector slows both levee and this test's
// generator down. The full form, by hand:
//
//	LEVEE_TEST_UPGRADES=20 LEVEE_TEST_UPGRADE_RATE=5000 LEVEE_TEST_UPGRADE_LIMIT=300 \
//	  go test -run TestUpgradeOpenLoop ./cmd/levee/
//
// No connection is refused or reset, no answer truncated; every request
// gets its answer or a limit's refusal; b admits at most its limit (+2%)
// over a window around each upgrade, counted at the backend; the backend
// never has more of a's requests in flight than a's concurrency, which
// the load reaches. The instance lock is held by one lock throughout.
func TestUpgradeOpenLoop(t *testing.T) {
	skipDrillOnEngineRerun(t)
	upgrades := envInt("LEVEE_TEST_UPGRADES", 3)
	rate := envInt("LEVEE_TEST_UPGRADE_RATE", 50)
	limit := envInt("LEVEE_TEST_UPGRADE_LIMIT", 50)
	// a's backend holds each request 50 ms; a's concurrency is 85% of
	// what the load wants in flight, so it is always reached, and the
	// excess waits in a's queue or is refused (503 with Retry-After).
	hold := 50 * time.Millisecond
	conc := max(2, int(float64(rate)*hold.Seconds()*0.85))
	port := freePort(t)
	backend := fmt.Sprintf("127.0.0.1:%d", port)
	// a second of load may be outstanding: a handover is far shorter
	inFlight := max(512, rate)
	// The load comes from one address, and stands for many clients: each
	// of its two HTTP/1.1 streams may hold inFlight connections in use
	// and as many idle. server.max_conns_per_ip (4,096 by default) would
	// refuse it as one client past its bound, which the drill counts as
	// failures: answered (503) up to 256 at once, closed unanswered past
	// that (a reset). At 5,000/s on a stalled machine, 4,096 are reached.
	perIP := 4*inFlight + 1024
	extra := upgradeDrillExtra(backend,
		fmt.Sprintf("    limits: {concurrency: %d, queue: {max_len: %d, max_wait: 50ms}}\n", conc, 4*conc), limit)
	u := startUpgradableWith(t, func(lock string) string {
		cfg := upgradeConfig(backend, lock, extra)
		bounded := strings.Replace(cfg, "drain_timeout: 5s",
			fmt.Sprintf("drain_timeout: 5s, max_conns_per_ip: %d", perIP), 1)
		if bounded == cfg {
			t.Fatalf("no server line to raise max_conns_per_ip in:\n%s", cfg)
		}
		return bounded
	})
	w := watchLock(t, u.lock)
	d, _ := drill.Lookup("upgrade")
	o := drill.Options{Target: u.proxy, Host: "a.test", Command: u.upgradeCommand(), Runs: upgrades,
		UpgradeRate: float64(rate), UpgradePort: port, UpgradeHold: hold, Concurrency: conc,
		LimitHost: "b.test", Limit: float64(limit), LimitOffered: 1.5, BurstTolerance: 0.02,
		MaxInFlight: inFlight, Timeout: 15 * time.Second, RouteWait: waitTimeout}.Defaults()
	r := d.Run(context.Background(), o)
	card := drill.NewCard(o.Target, time.Now(), []*drill.Report{r})
	var table strings.Builder
	_ = card.WriteTable(&table)
	if r.Verdict != drill.Pass {
		u.fatalf("the upgrade drill: %s %s\n%s", r.Verdict, r.Reason, table.String())
	}
	u.upgraded(upgrades)
	w.end()
	if f := w.failure.Load(); f != nil {
		u.fatalf("instance lock: %s", *f)
	}
	if got := r.Ratios["backend in flight peak/concurrency"]; got != 1 {
		u.fatalf("a's backend peak was %v of its concurrency %d: the load did not reach the limit\n%s", got, conc, table.String())
	}
	t.Logf("%d upgrades at %d/s:\n%s", upgrades, rate, table.String())
}

// TestUpgradeOpenLoopHTTP2: the upgrade drill's open-loop load, with a
// stream over HTTP/2 beside the HTTP/1.1 one (keep-alive and fresh, on a
// listener that also takes h2c), over TLS and over h2c: the streams in
// flight at a handover finish on the old levee, which sends GOAWAY; new
// streams go to the new one, and no client sees an error. The drill reads
// the HTTP/2 frames: every connection levee ended had a GOAWAY first (an
// idle one closed without it shows no client error, only this), levee
// reset or refused no stream, answered none above a GOAWAY's last, and
// no connection opened after a handover was ended by the old levee. Each
// run ended at least one connection with a GOAWAY, so those checks had
// something to grade.
func TestUpgradeOpenLoopHTTP2(t *testing.T) {
	skipDrillOnEngineRerun(t)
	certFile, keyFile := testcert.Files(t, "a.test")
	port := freePort(t)
	backend := fmt.Sprintf("127.0.0.1:%d", port)
	u := startUpgradableWith(t, func(lock string) string {
		cfg := upgradeConfig(backend, lock, "")
		return strings.Replace(cfg, listenLine(), fmt.Sprintf("listen: [{addr: 127.0.0.1:0, h2c: true}, "+
			"{addr: 127.0.0.1:0, tls: {cert: %s, key: %s}}]", certFile, keyFile), 1)
	})
	if len(u.listen) != 2 {
		u.fatalf("listening on %v; want the h2c and the TLS listener", u.listen)
	}
	upgrades := 0
	for _, target := range []string{"http://" + u.listen[0], "https://" + u.listen[1]} {
		func() {
			d, _ := drill.Lookup("upgrade")
			o := drill.Options{Target: u.proxy, Host: "a.test", Command: u.upgradeCommand(), Runs: 2,
				UpgradeRate: 100, UpgradePort: port, UpgradeHold: 50 * time.Millisecond,
				H2Target: target, H2Rate: 200, H2CA: certFile,
				MaxInFlight: 512, Timeout: 15 * time.Second, RouteWait: waitTimeout}.Defaults()
			r := d.Run(context.Background(), o)
			card := drill.NewCard(o.Target, time.Now(), []*drill.Report{r})
			var table strings.Builder
			_ = card.WriteTable(&table)
			if r.Verdict != drill.Pass {
				u.fatalf("the upgrade drill over HTTP/2 (%s): %s %s\n%s", target, r.Verdict, r.Reason, table.String())
			}
			var h2 *drill.Stream
			for i := range r.Streams {
				if strings.HasPrefix(r.Streams[i].Name, "h2 ") {
					h2 = &r.Streams[i]
				}
			}
			if h2 == nil || h2.OK == 0 || h2.OK != h2.Sent {
				u.fatalf("HTTP/2 stream %+v: want every request answered 200\n%s", h2, table.String())
			}
			for _, name := range []string{"every HTTP/2 connection the edge ended had a GOAWAY",
				"no HTTP/2 stream reset or refused by the edge", "HTTP/2 streams after a handover went to the new process"} {
				if c := reportCheck(r, name); c == nil || !c.Pass {
					u.fatalf("check %q: %+v\n%s", name, c, table.String())
				}
			}
			if got := r.Ratios["runs with an HTTP/2 GOAWAY"]; got != 1 {
				u.fatalf("%v of the runs sent an HTTP/2 GOAWAY; want every one\n%s", got, table.String())
			}
			upgrades += 2
			u.upgraded(upgrades)
			t.Logf("%s:\n%s", target, table.String())
		}()
	}
}
