package config

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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

func TestParseRate(t *testing.T) {
	tests := []struct {
		in           string
		want         Rate
		wantInterval time.Duration
		wantPerSec   float64
		wantString   string
		wantErr      string // fragment; "" means success
	}{
		{in: "750/s", want: Rate{750, time.Second}, wantInterval: 1_333_334, wantPerSec: 750, wantString: "750/s"},
		{in: "100/m", want: Rate{100, time.Minute}, wantInterval: 600 * time.Millisecond, wantPerSec: 100.0 / 60, wantString: "100/m"},
		{in: "10/h", want: Rate{10, time.Hour}, wantInterval: 6 * time.Minute, wantPerSec: 10.0 / 3600, wantString: "10/h"},
		{in: "0.5/s", want: Rate{0.5, time.Second}, wantInterval: 2 * time.Second, wantPerSec: 0.5, wantString: "0.5/s"},
		{in: " 4 / s ", want: Rate{4, time.Second}, wantInterval: 250 * time.Millisecond, wantPerSec: 4, wantString: "4/s"},
		{in: "3/s", want: Rate{3, time.Second}, wantInterval: 333_333_334, wantPerSec: 3, wantString: "3/s"},
		{in: "0.1/s", want: Rate{0.1, time.Second}, wantInterval: 10 * time.Second, wantPerSec: 0.1, wantString: "0.1/s"},
		{in: "1000000000/s", want: Rate{1e9, time.Second}, wantInterval: 1, wantPerSec: 1e9, wantString: "1000000000/s"},
		{in: "60000000000/m", want: Rate{6e10, time.Minute}, wantInterval: 1, wantPerSec: 1e9, wantString: "60000000000/m"},
		{in: "24/h", want: Rate{24, time.Hour}, wantInterval: 150 * time.Second, wantPerSec: 24.0 / 3600, wantString: "24/h"},
		{in: "0.5/h", want: Rate{0.5, time.Hour}, wantInterval: 2 * time.Hour, wantPerSec: 0.5 / 3600, wantString: "0.5/h"},
		{in: "007.50/s", want: Rate{7.5, time.Second}, wantInterval: 133_333_334, wantPerSec: 7.5, wantString: "7.5/s"},
		{in: "", wantErr: "is not a rate"},
		{in: "750", wantErr: "is not a rate"},
		{in: "750/", wantErr: "unit after / must be"},
		{in: "/s", wantErr: "is not a rate"},
		{in: "750/x", wantErr: "unit after / must be"},
		{in: "750/S", wantErr: "unit after / must be"},
		{in: "750/ms", wantErr: "unit after / must be"},
		{in: "750/s/s", wantErr: "unit after / must be"},
		{in: "0/s", wantErr: "greater than 0"},
		{in: "0.0/m", wantErr: "greater than 0"},
		{in: "-1/s", wantErr: "is not a rate"},
		{in: "+1/s", wantErr: "is not a rate"},
		{in: "1e3/s", wantErr: "is not a rate"},
		{in: "Inf/s", wantErr: "is not a rate"},
		{in: "NaN/s", wantErr: "is not a rate"},
		{in: "0x10/s", wantErr: "is not a rate"},
		{in: "1_000/s", wantErr: "is not a rate"},
		{in: ".5/s", wantErr: "is not a rate"},
		{in: "5./s", wantErr: "is not a rate"},
		{in: "1.2.3/s", wantErr: "is not a rate"},
		{in: "1 000/s", wantErr: "is not a rate"},
		{in: "1000000001/s", wantErr: "too large"},
		{in: "60000000001/m", wantErr: "too large"},
		{in: "1" + strings.Repeat("0", 400) + "/s", wantErr: "too large"},
		{in: "0." + strings.Repeat("0", 400) + "1/s", wantErr: "greater than 0"},
		{in: "0.9/h", wantErr: ""},
		{in: "0.5/m", wantErr: ""},
		{in: "0.01/h", wantErr: "too small"},
		{in: "0.00001/s", wantErr: "too small"},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != (Rate{}) {
				t.Errorf("ParseRate(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRate(%q) error %v", tt.in, err)
			continue
		}
		if tt.want == (Rate{}) { // only checks that it parses
			continue
		}
		if got != tt.want || got.Interval() != tt.wantInterval || got.PerSecond() != tt.wantPerSec || got.String() != tt.wantString {
			t.Errorf("ParseRate(%q) = %v (interval %v, %v/s, %q); want %v (interval %v, %v/s, %q)", tt.in,
				got, got.Interval(), got.PerSecond(), got.String(), tt.want, tt.wantInterval, tt.wantPerSec, tt.wantString)
		}
	}
}

func TestRateZeroAndYAML(t *testing.T) {
	var zero Rate
	if zero.PerSecond() != 0 || zero.Interval() != 0 || zero.String() != "" {
		t.Errorf("zero Rate: PerSecond %v, Interval %v, String %q; want 0, 0, \"\"", zero.PerSecond(), zero.Interval(), zero.String())
	}
	type doc struct {
		R Rate `yaml:"rate"`
	}
	var d doc
	if err := yaml.Unmarshal([]byte("rate: 750/s\n"), &d); err != nil || d.R != (Rate{750, time.Second}) {
		t.Fatalf("yaml rate: 750/s = %v, %v", d.R, err)
	}
	out, err := yaml.Marshal(d)
	if err != nil || string(out) != "rate: 750/s\n" {
		t.Errorf("yaml.Marshal = %q, %v; want %q", out, err, "rate: 750/s\n")
	}
	for _, src := range []string{"rate: [1, 2]\n", "rate: {a: 1}\n", "rate: 750\n", "rate: 0/s\n"} {
		if err := yaml.Unmarshal([]byte(src), &d); err == nil {
			t.Errorf("yaml %q: no error", src)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"750/s", "100/m", "10/h", "0.5/s", " 4 / s ", "0/s", "-1/s", "750", "1e3/s",
		"1000000001/s", "0.01/h", "1.2.3/s", "/", "7.5/h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if r != (Rate{}) {
				t.Fatalf("ParseRate(%q) = %v with error %v, want the zero Rate", s, r, err)
			}
			return
		}
		ps, iv := r.PerSecond(), r.Interval()
		if !(ps >= MinRatePerSecond && ps <= MaxRatePerSecond) || iv < 1 || iv > 24*time.Hour {
			t.Fatalf("ParseRate(%q) = %v: %v/s, interval %v out of bounds", s, r, ps, iv)
		}
		// T never admits more than the rate: T >= 1/rate, within a nanosecond's rounding.
		if exact := 1e9 / ps; float64(iv) < exact*(1-1e-12)-1e-6 || float64(iv) > exact+1 {
			t.Fatalf("ParseRate(%q): interval %v, want ceil(%v ns)", s, iv, exact)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %v, but ParseRate(%q) = %v, %v", s, r, r.String(), back, err)
		}
	})
}
