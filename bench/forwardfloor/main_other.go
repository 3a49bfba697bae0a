//go:build !linux

// Command forwardfloor is bench/proxy.sh's floor of a request forwarded
// from an event loop: Linux only (epoll).
package main

import "log"

func main() { log.Fatal("forwardfloor: Linux only (epoll)") }
