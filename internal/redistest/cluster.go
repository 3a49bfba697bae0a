package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartCluster launches a Redis Cluster of n masters (no replicas) on
// loopback TCP ports, every slot assigned, and returns their addresses; it
// skips or fails t like Start, and stops every node when t ends. A cluster
// needs TCP: each node also listens on its port + 10000 for the cluster bus.
func StartCluster(t testing.TB, n int) []string {
	t.Helper()
	bin := lookPath(t)
	dir, err := os.MkdirTemp("", "levee-redis-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = startNode(t, bin, dir, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	per := 16384 / n
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		last := per*(i+1) - 1
		if i == n-1 {
			last = 16383
		}
		if err := c.ClusterAddSlotsRange(ctx, per*i, last).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", a, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[0])
			if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
				t.Fatalf("redistest: CLUSTER MEET from %s: %v", a, err)
			}
		}
		c.Close()
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("redistest: cluster not ready after %v: %v\n%s", startDeadline, err, info)
			case <-time.After(20 * time.Millisecond):
			}
		}
		c.Close()
	}
	return addrs
}

// startNode starts cluster node i on a free port whose bus port is free too.
// Another process may take a port between the probe and the start: then it
// tries another, a few times.
func startNode(t testing.TB, bin, dir string, i int) string {
	t.Helper()
	var lastErr error
	for range 5 {
		port, err := freePortPair()
		if err != nil {
			lastErr = err
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logf := filepath.Join(dir, fmt.Sprintf("node%d-%d.log", i, port))
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes%d-%d.conf", i, port)),
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logf)
		if err := cmd.Start(); err != nil {
			t.Fatalf("redistest: start redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }() // ends when the process does
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		})
		if lastErr = waitTCP(addr, exited); lastErr == nil {
			return addr
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	t.Fatalf("redistest: no cluster node started: %v", lastErr)
	return ""
}

// waitTCP waits until addr answers PING, the process exits, or the deadline.
func waitTCP(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(startDeadline)
	for {
		err := pingNet("tcp", addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited at start", addr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// freePortPair finds a loopback port p with p + 10000 free as well.
func freePortPair() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		bus.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair")
}
