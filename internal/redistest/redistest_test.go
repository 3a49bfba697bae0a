package redistest

import "testing"

func TestStartRestartStop(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	s.Stop()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("ping after stop succeeded")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("ping while paused answered")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping after resume: %v", err)
	}
	s.Pause() // left paused: the cleanup resumes it before Stop
}

func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t, 3)
	for _, a := range addrs {
		if err := pingNet("tcp", a); err != nil {
			t.Errorf("ping %s: %v", a, err)
		}
	}
}
