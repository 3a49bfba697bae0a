package config

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string // fragment; "" means success
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: " 4096 ", want: 4096},
		{in: "5B", want: 5},
		{in: "1K", want: 1000},
		{in: "64KB", want: 64_000},
		{in: "10MB", want: 10_000_000},
		{in: "10mb", want: 10_000_000},
		{in: "10 MB", want: 10_000_000},
		{in: "1m", want: 1_000_000},
		{in: "1GB", want: 1_000_000_000},
		{in: "2g", want: 2_000_000_000},
		{in: "64KiB", want: 64 << 10},
		{in: "64kib", want: 64 << 10},
		{in: "2MiB", want: 2 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "4611686018427387904", want: 1 << 62},
		{in: "4294967296GiB", want: 1 << 62},
		{in: "", wantErr: "is not a size"},
		{in: "MB", wantErr: "is not a size"},
		{in: "-1", wantErr: "is not a size"},
		{in: "-1KB", wantErr: "is not a size"},
		{in: "1.5MB", wantErr: "is not a size"},
		{in: "10XB", wantErr: "is not a size"},
		{in: "1TB", wantErr: "is not a size"},
		{in: "1e3", wantErr: "is not a size"},
		{in: "0x10", wantErr: "is not a size"},
		{in: "10 M B", wantErr: "is not a size"},
		{in: "9223372036854775808", wantErr: "is not a size"},
		{in: "4611686018427387905", wantErr: "too large"},
		{in: "4294967297GiB", wantErr: "too large"},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ParseByteSize(%q) error %v, want %d", tt.in, err, tt.want)
		case tt.wantErr == "" && got != tt.want:
			t.Errorf("ParseByteSize(%q) = %d, want %d", tt.in, got, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParseByteSize(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "50ms", want: 50 * time.Millisecond},
		{in: "2s", want: 2 * time.Second},
		{in: " 2s ", want: 2 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "1h", want: time.Hour},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "0s", want: 0},
		{in: "0", want: 0},              // the one bare number allowed
		{in: "-1s", want: -time.Second}, // parses; validation decides
		{in: "50", wantErr: true},
		{in: "1.5", wantErr: true},
		{in: "", wantErr: true},
		{in: "ms", wantErr: true},
		{in: "5 s", wantErr: true},
		{in: "five seconds", wantErr: true},
		{in: "9999999999h", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "is not a duration") {
				t.Errorf("ParseDuration(%q) = %v, %v; want a not-a-duration error", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestUnitsMarshal(t *testing.T) {
	if v, _ := Duration(50 * time.Millisecond).MarshalYAML(); v != "50ms" {
		t.Errorf("Duration.MarshalYAML = %v, want 50ms", v)
	}
	if v, _ := ByteSize(10_000_000).MarshalYAML(); v != int64(10_000_000) {
		t.Errorf("ByteSize.MarshalYAML = %v, want 10000000", v)
	}
	if d := Duration(time.Second); d.D() != time.Second || d.String() != "1s" {
		t.Errorf("Duration(1s): D() = %v, String() = %q", d.D(), d.String())
	}
}

func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"0", "4096", "10MB", "64KiB", "1GiB", " 7 kb ", "-1", "1.5MB", "4611686018427387905", "B", "k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseByteSize(%q) = %d with error %v, want 0", s, n, err)
			}
			return
		}
		if n < 0 || n > 1<<62 {
			t.Fatalf("ParseByteSize(%q) = %d, out of 0..2^62", s, n)
		}
		// A plain byte count is its own canonical form.
		if back, err := ParseByteSize(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("ParseByteSize(%d) = %d, %v after ParseByteSize(%q)", n, back, err, s)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"50ms", "2s", "1m30s", "0", "50", "", "-1s", "1.5h", "9999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		want, wantErr := time.ParseDuration(strings.TrimSpace(s))
		if (err != nil) != (wantErr != nil) || d != want && err == nil {
			t.Fatalf("ParseDuration(%q) = %v, %v; time.ParseDuration gives %v, %v", s, d, err, want, wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "is not a duration") {
			t.Fatalf("ParseDuration(%q) error %q does not say what is wrong", s, err)
		}
		if err == nil && d != 0 && !strings.ContainsAny(s, "nsuµmh") {
			t.Fatalf("ParseDuration(%q) = %v without a unit", s, d)
		}
	})
}
