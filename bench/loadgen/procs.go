package main

import "runtime"

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
