package ratelimit

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPolicy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		lim     Limit
		window  time.Duration
		want    string
		wantErr string
	}{
		{"app", Limit{1_333_334, 75}, time.Second, `"app";q=750;w=1;levee-burst=75`, ""},
		{"app", Limit{1_333_334, 75}, 0, `"app";q=750;w=1;levee-burst=75`, ""},
		{"client", Limit{600 * time.Millisecond, 10}, time.Minute, `"client";q=100;w=60;levee-burst=10`, ""},
		{"slow", Limit{6 * time.Minute, 3}, time.Hour, `"slow";q=10;w=3600;levee-burst=3`, ""},
		{"half", Limit{2 * time.Second, 1}, 0, `"half";q=1;w=2;levee-burst=1`, ""},
		{"odd", Limit{1500 * time.Millisecond, 1}, 0, `"odd";q=1;w=2;levee-burst=1`, ""},
		{`a"b\c`, Limit{time.Second, 1}, 0, `"a\"b\\c";q=1;w=1;levee-burst=1`, ""},
		{"", Limit{time.Second, 1}, 0, `"";q=1;w=1;levee-burst=1`, ""},
		{"é", Limit{time.Second, 1}, 0, "", "printable ASCII"},
		{"a\nb", Limit{time.Second, 1}, 0, "", "printable ASCII"},
		{"app", Limit{time.Second, 1}, 1500 * time.Millisecond, "", "whole seconds"},
		{"app", Limit{time.Second, 1}, -time.Second, "", "whole seconds"},
		{"app", Limit{3 * time.Second, 1}, time.Second, "", "too short"},
		{"app", Limit{}, 0, "", "invalid limit"},
	} {
		p, err := NewPolicy(tt.name, tt.lim, tt.window)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewPolicy(%q, %+v, %v) = %q, %v; want an error containing %q", tt.name, tt.lim, tt.window, p.Header(), err, tt.wantErr)
			}
			continue
		}
		if err != nil || p.Header() != tt.want {
			t.Errorf("NewPolicy(%q, %+v, %v) = %q, %v; want %q", tt.name, tt.lim, tt.window, p.Header(), err, tt.want)
		}
	}
}

func TestRateLimitHeader(t *testing.T) {
	p, err := NewPolicy("app", Limit{100 * time.Millisecond, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		d          Decision
		want       string
		retryAfter int64
	}{
		{Decision{Allowed: true, Remaining: 3}, `"app";r=3;t=0`, 1},
		{Decision{Allowed: true, Remaining: 2, Reset: 100 * time.Millisecond}, `"app";r=2;t=1`, 1},
		{Decision{Allowed: true, Remaining: 0, Reset: 2*time.Second + 1}, `"app";r=0;t=3`, 1},
		{Decision{RetryAfter: 1, Reset: 300 * time.Millisecond}, `"app";r=0;t=1`, 1},
		{Decision{RetryAfter: time.Second, Reset: 3 * time.Second}, `"app";r=0;t=1`, 1},
		{Decision{RetryAfter: time.Second + 1, Reset: 3 * time.Second}, `"app";r=0;t=2`, 2},
		{Decision{RetryAfter: 90 * time.Second, Remaining: 1}, `"app";r=1;t=90`, 90},
		{Decision{RetryAfter: Never}, `"app";r=0;t=9223372037`, 9223372037},
		{Decision{Remaining: -1}, `"app";r=0;t=0`, 1},
	} {
		if got := string(p.AppendRateLimit(nil, tt.d)); got != tt.want {
			t.Errorf("AppendRateLimit(%+v) = %q, want %q", tt.d, got, tt.want)
		}
		if got := RetryAfterSeconds(tt.d); got != tt.retryAfter {
			t.Errorf("RetryAfterSeconds(%+v) = %d, want %d", tt.d, got, tt.retryAfter)
		}
		if got, want := string(AppendRetryAfter([]byte("x"), tt.d)), "x"+strconv.FormatInt(tt.retryAfter, 10); got != want {
			t.Errorf("AppendRetryAfter(%+v) = %q, want %q", tt.d, got, want)
		}
	}
}
