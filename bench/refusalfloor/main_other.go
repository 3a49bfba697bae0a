//go:build !linux

// Command refusalfloor is bench/refusal.sh's floor, an epoll loop: Linux
// only.
package main

import "log"

func main() { log.Fatal("refusalfloor: Linux only (epoll)") }
