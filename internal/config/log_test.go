package config

import (
	"log/slog"
	"testing"
)

func TestLogSlogLevel(t *testing.T) {
	for level, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo,
		"warn": slog.LevelWarn, "error": slog.LevelError} {
		if got := (Log{Level: level}).SlogLevel(); got != want {
			t.Errorf("log.level %s: %v; want %v", level, got, want)
		}
	}
}
