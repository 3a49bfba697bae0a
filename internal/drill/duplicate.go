package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

var duplicateInstance = &Drill{
	Name: "duplicate-instance",
	Incident: "A deploy bug left two proxy instances running on one host, each enforcing the full " +
		"per-process limit alone: the configured limit silently doubled.",
	Applies: func(o Options) (bool, string) {
		return need("--config (the running levee's)", o.Config != "", "--host", o.Host != "", "--limit", o.Limit > 0,
			"a levee binary", o.Levee != "")
	},
	run: runDuplicate,
}

// roleMetric is how a levee with an instance lock says it should not be running.
const roleMetric = `levee_instance_role{role="unexpected"} 1`

// runDuplicate starts a second levee on the running one's config. It passes
// when the second refuses to start, or serves with limits so strict that
// both together stay within the one limit (and says so in its metrics).
func runDuplicate(ctx context.Context, o Options, r *Report) error {
	dir, err := os.MkdirTemp("", "levee-drill-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// A second levee that exits on a config error has refused nothing.
	if out, err := exec.CommandContext(ctx, o.Levee, "check", "--config", o.Config).CombinedOutput(); err != nil {
		return fmt.Errorf("%s does not pass `levee check`: %s", o.Config, strings.TrimSpace(string(out)))
	}
	// First the very same file, as a deploy bug would start it: an instance
	// lock refuses it before it binds anything.
	second, err := startSecond(ctx, o.Levee, o.Config, o.StartWait)
	if err != nil {
		return err
	}
	defer func() { second.stop() }()
	switch {
	case second.exited && !second.bindError():
		r.Checks = gradeDuplicate(second, nil, nil, o)
		return nil
	case second.proxyAddr == "":
		// It could not bind the first one's listeners (or serves where we
		// cannot see). Run a copy with the listeners moved, as on a host with
		// a second address or SO_REUSEPORT, to see whether it would have
		// served with full limits.
		second.stop()
		cp, err := moveListeners(o.Config, dir)
		if err != nil {
			return err
		}
		r.Notes = append(r.Notes, fmt.Sprintf("the second instance could not bind the first one's listeners; "+
			"ran a copy of %s with listen and admin on free loopback ports. An instance lock derived from the "+
			"config path sees a different path for the copy: set the lock file explicitly for this drill", o.Config))
		if second, err = startSecond(ctx, o.Levee, cp, o.StartWait); err != nil {
			return err
		}
		if second.exited {
			r.Checks = gradeDuplicate(second, nil, nil, o)
			return nil
		}
		if second.proxyAddr == "" {
			return fmt.Errorf("the second levee serves, but its log does not say where (log.format text is needed): %s", second.lastLine())
		}
	}
	proxyAddr, adminAddr := second.proxyAddr, second.adminAddr
	// Both serve: offer the limit's multiple, split across the two.
	half := o.Limit * o.Offered / 2
	var a, b *Result
	oa, ob := o, o
	ob.Target = "http://" + proxyAddr
	parallel(
		func() {
			a = stream(ctx, oa, "first instance", constant(half, o.Duration, o.MaxRequests), 0, get(o.Host, o.Path, o.Clients))
		},
		func() {
			b = stream(ctx, ob, "second instance", constant(half, o.Duration, o.MaxRequests), 0, get(o.Host, o.Path, o.Clients))
		},
	)
	r.add(a, b)
	second.metrics = scrape(ctx, "http://"+adminAddr+"/metrics")
	r.Checks = gradeDuplicate(second, a, b, o)
	r.ratio("admitted by both/limit", (a.OKRate()+b.OKRate())/o.Limit)
	return nil
}

// gradeDuplicate: refused (a non-zero exit, not a bind error), or serving
// with levee_instance_role{role="unexpected"} 1 and both instances' admitted
// total within the one limit.
func gradeDuplicate(s *secondInstance, a, b *Result, o Options) []Check {
	if s.exited {
		return []Check{{
			Name: "second instance refuses to start",
			Pass: s.code != 0 && !s.bindError(),
			Got:  fmt.Sprintf("exit %d: %s", s.code, s.lastLine()),
			Want: "a non-zero exit naming the running instance",
		}}
	}
	role := Check{Name: "second instance knows it is unexpected", Pass: strings.Contains(s.metrics, roleMetric),
		Got: "no levee_instance_role metric (no instance lock)", Want: roleMetric}
	if role.Pass {
		role.Got = roleMetric
	}
	total := a.OKRate() + b.OKRate()
	return []Check{
		role,
		{
			Name: "shared limit does not double",
			Pass: total > 0 && total <= o.Limit*(1+o.Tolerance),
			Got:  fmt.Sprintf("%.1f/s admitted by both (%.1f + %.1f)", total, a.OKRate(), b.OKRate()),
			Want: fmt.Sprintf("> 0 and <= %g/s + %.0f%%", o.Limit, 100*o.Tolerance),
		},
	}
}

type secondInstance struct {
	cmd     *exec.Cmd
	done    chan struct{}
	exited  bool
	code    int
	out     *capBuffer
	metrics string
	// where it serves, from its log
	proxyAddr, adminAddr string
}

func (s *secondInstance) bindError() bool {
	return strings.Contains(s.out.String(), "address already in use")
}

func (s *secondInstance) lastLine() string {
	lines := strings.Split(strings.TrimSpace(s.out.String()), "\n")
	return lines[len(lines)-1]
}

// stop ends the second instance (TERM, then KILL after 10 s) and waits.
func (s *secondInstance) stop() {
	if s == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// servingLine is levee's text log line once it serves: its first listener and admin.
var servingLine = regexp.MustCompile(`msg="levee serving" listen=\[([^\] ]+)[^\]]*\] admin=(\S+)`)

// startSecond runs `levee serve --config path` and waits until it exits or
// logs that it serves (then proxyAddr and adminAddr are set); at most wait.
func startSecond(ctx context.Context, bin, path string, wait time.Duration) (*secondInstance, error) {
	s := &secondInstance{out: &capBuffer{max: 64 << 10}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve", "--config", path)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a second levee: %w", err)
	}
	go func() {
		err := s.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			s.code = ee.ExitCode()
		}
		close(s.done)
	}()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			s.exited = true
			return s, nil
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-deadline.C:
			s.stop()
			return nil, fmt.Errorf("the second levee neither exited nor served within %v: %s", wait, s.lastLine())
		case <-tick.C:
			if m := servingLine.FindStringSubmatch(s.out.String()); m != nil {
				s.proxyAddr, s.adminAddr = m[1], m[2]
				return s, nil
			}
		}
	}
}

func scrape(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b)
}

// moveListeners writes a copy of the config at path into dir with listen and
// admin on free loopback ports, everything else as it was.
func moveListeners(path, dir string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("%s: not a YAML mapping", path)
	}
	root := doc.Content[0]
	set := func(key, val string) {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == key {
				root.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Value: val}
				return
			}
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: val})
	}
	// port 0: the kernel picks free ports, and the log line says which
	set("listen", "127.0.0.1:0")
	set("admin", "127.0.0.1:0")
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return "", err
	}
	cp := filepath.Join(dir, filepath.Base(path))
	return cp, os.WriteFile(cp, out, 0o600)
}

// capBuffer keeps the first max bytes written to it; safe for concurrent use.
type capBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
