package main

// The upgrade drill (internal/drill) graded on levee's own upgrade.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/drill/drilltest"
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
