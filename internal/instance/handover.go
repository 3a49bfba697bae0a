package instance

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// File returns the open lock file, for handing the lock to the levee that
// replaces this one (package upgrade): the flock belongs to the open file
// description, so a process that inherits a duplicate of this descriptor
// holds the very same lock, and the lock stays held until the last of
// them closes it. No third process can take it in between. The file stays
// owned by l; nil after Release.
func (l *Lock) File() *os.File {
	if l == nil {
		return nil
	}
	return l.f
}

// Adopt takes over a lock inherited from the levee being replaced: f must
// be the lock file at path, and its open file description must hold the
// flock (or take it now, if nobody holds it). The file still names the
// old holder until Claim: the new one claims it once it serves, so that a
// failed upgrade leaves the file naming the levee still serving. A descriptor that is not the lock at path, or whose
// lock another process holds, is refused and left open for the caller.
func Adopt(path string, f *os.File) (*Lock, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("instance: inherited lock: %w", err)
	}
	on, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("instance: inherited lock: %w", err)
	}
	if !os.SameFile(fi, on) {
		return nil, fmt.Errorf("instance: the inherited lock is not %s (the new config names another lock file)", path)
	}
	// flock on a description that holds the lock already is a no-op; on
	// one that does not, it fails while another holds it.
	if err := lockNB(f); err != nil {
		if errors.Is(err, errWouldBlock) {
			return nil, &HeldError{Path: path, PID: readPID(f)}
		}
		return nil, fmt.Errorf("instance: inherited lock %s: %w", path, err)
	}
	return &Lock{f: f, path: path}, nil
}

// Claim writes this process's PID in the lock file, as the holder.
func (l *Lock) Claim() {
	if l == nil || l.f == nil {
		return
	}
	if err := l.f.Truncate(0); err == nil {
		_, _ = l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// HolderPID is the PID the holder of the lock at path wrote in it; 0 when
// the file is missing, unreadable or names none. It says who held the
// lock last; whether it is still held is TryAcquire's to tell.
func HolderPID(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return readPID(f)
}
