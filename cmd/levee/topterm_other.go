//go:build !unix

package main

import (
	"errors"
	"os"
)

// terminal is the full-screen view's terminal, on Unix only.
type terminal struct {
	out     *os.File
	keys    chan []byte
	resized chan os.Signal
}

func openTerminal(out, in *os.File) (*terminal, error) {
	return nil, errors.New("top: the interactive view needs a Unix terminal; use --once, or --once --json")
}

func (t *terminal) close() {}
