package upgrade

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// childEnv makes this test binary act as the new process of an upgrade,
// in the role it names (TestMain).
const childEnv = "LEVEE_UPGRADE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

// child plays the new levee: it takes the socket "proxy test", then
// fails, crashes or serves as role says.
func child(role string) int {
	in, err := FromEnv()
	if err != nil || in == nil {
		fmt.Fprintln(os.Stderr, "child: no upgrade:", err)
		return 2
	}
	ln, err := in.Sockets().Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		in.Fail(err)
		return 1
	}
	if role == "refuse" {
		in.Fail(errors.New("config: apps.a: bad"))
		return 1
	}
	state, gone, err := in.Prepared(context.Background())
	if err != nil || gone {
		return 1
	}
	if role == "crash" {
		return 3 // after taking the state, before serving
	}
	if err := in.Serving(); err != nil {
		return 1
	}
	// Answer one connection with the state it was handed, and another,
	// once the old process has gone, with the reports it sent.
	serveOne(ln, state)
	var reports []string
	err = in.Reports(context.Background(), func(b []byte) { reports = append(reports, string(b)) })
	serveOne(ln, []byte(strings.Join(reports, ",")+fmt.Sprint(" ", err)))
	return 0
}

func serveOne(ln net.Listener, answer []byte) {
	if c, err := ln.Accept(); err == nil {
		c.Write(answer)
		c.Close()
	}
}

func ask(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 64)
	n, _ := conn.Read(got)
	return string(got[:n])
}

func startChild(t *testing.T, s *Sockets, role string) (*Child, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Start(ctx, Spec{Binary: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append(os.Environ(), childEnv+"="+role), Stdout: os.Stdout, Stderr: os.Stderr,
		Sockets: s, Timeout: 10 * time.Second})
}

// A new process that refuses to start, or crashes after taking the state,
// fails the upgrade with its reason; one that serves gets the socket, the
// state and the reports.
func TestStartHandoverAndFailures(t *testing.T) {
	var s Sockets
	ln, err := s.Listen("proxy test", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	_, err = startChild(t, &s, "refuse")
	var failed *FailedError
	if !errors.As(err, &failed) || !strings.Contains(err.Error(), "config: apps.a: bad") {
		t.Fatalf("refusing child: %v, want a FailedError with its reason", err)
	}

	c, err := startChild(t, &s, "crash")
	if err != nil {
		t.Fatalf("crashing child, before it crashes: %v", err)
	}
	if err := c.Handover(context.Background(), []byte("state")); err == nil || !strings.Contains(err.Error(), "exited before serving") {
		t.Fatalf("child that crashed in the handover: %v, want it said", err)
	}

	c, err = startChild(t, &s, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Handover(context.Background(), []byte("the state")); err != nil {
		t.Fatal(err)
	}
	// This process has stopped accepting (its caller pauses it): only
	// the new one answers.
	s.Pause()
	if got := ask(t, ln.Addr().String()); got != "the state" {
		t.Errorf("the new process answered %q, want the state it was handed", got)
	}
	for _, r := range []string{"r1", "r2"} {
		if err := c.Report([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if got := ask(t, ln.Addr().String()); got != "r1,r2 <nil>" {
		t.Errorf("the new process got the reports %q, want \"r1,r2 <nil>\" (the reports, then the end)", got)
	}
	if pid := c.PID(); pid <= 0 {
		t.Errorf("PID = %d", pid)
	}
}
