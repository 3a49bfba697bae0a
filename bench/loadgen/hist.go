package main

import (
	"math"
	"time"

	"github.com/leveeproxy/levee/internal/drill"
)

// Histogram and LatencySummary are levee drill's: one log-linear latency
// histogram for the drills and this benchmark generator.
type (
	Histogram      = drill.Histogram
	LatencySummary = drill.LatencySummary
)

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 } // ms, µs precision
