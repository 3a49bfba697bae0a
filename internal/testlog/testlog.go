// Package testlog is the log sink levee's tests read while the code under
// test writes to it from other goroutines (a server's, a checker's, a
// child process's pipe copier): one Buffer instead of a private copy per
// package (STYLE.md, point 15).
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer whose content may be read while it is written.
// The zero Buffer is empty and ready; its methods are safe for concurrent
// use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count is how many times sub occurs in what was written so far.
func (s *Buffer) Count(sub string) int {
	return strings.Count(s.String(), sub)
}
