package deadline

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestParseMillis(t *testing.T) {
	for s, want := range map[string]time.Duration{"0": 0, "1500": 1500 * time.Millisecond, "": -1, "-1": -1, "1.5": -1,
		"12345678901234": -1, " 1": -1} {
		got, ok := ParseMillis(s)
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("ParseMillis(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	if FormatMillis(1999*time.Microsecond) != "1" || FormatMillis(-time.Second) != "0" {
		t.Error("FormatMillis rounds down, never below 0")
	}
}

func TestGRPCTimeout(t *testing.T) {
	for s, want := range map[string]time.Duration{"1S": time.Second, "250m": 250 * time.Millisecond, "2H": 2 * time.Hour,
		"99999999n": 99999999, "5": -1, "S": -1, "123456789m": -1, "1x": -1, "-1S": -1} {
		got, ok := ParseGRPCTimeout(s)
		if want < 0 && ok || want >= 0 && (!ok || got != want) {
			t.Errorf("ParseGRPCTimeout(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0n", 1500 * time.Millisecond: "1500000u", time.Hour: "3600000m",
		1001: "1001n", 100 * time.Hour: "360000S"} {
		if got := FormatGRPCTimeout(d); got != want {
			t.Errorf("FormatGRPCTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestLeft(t *testing.T) {
	start := time.Unix(100, 0)
	now := start.Add(300 * time.Millisecond)
	if got := Left(start, now, 30*time.Second, time.Second, true); got != 700*time.Millisecond {
		t.Errorf("client deadline: %v", got)
	}
	if got := Left(start, now, 30*time.Second, time.Hour, true); got != 29700*time.Millisecond {
		t.Errorf("app timeout: %v", got)
	}
	if got := Left(start, now, time.Second, 0, false); got != 700*time.Millisecond {
		t.Errorf("no client deadline: %v", got)
	}
}

// Round trips: what Format writes, Parse reads back no shorter.
func FuzzGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1S", "250m", "0n", "99999999H", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseGRPCTimeout(s)
		if !ok {
			return
		}
		back, ok := ParseGRPCTimeout(FormatGRPCTimeout(d))
		if !ok || back < d {
			t.Fatalf("%q: %v formats as %q, read back %v, %v", s, d, FormatGRPCTimeout(d), back, ok)
		}
	})
}

func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{"0", "1500", "", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseMillis(s)
		if ok && (d < 0 || FormatMillis(d) != trimZeros(s)) {
			t.Fatalf("%q: %v, formats as %q", s, d, FormatMillis(d))
		}
	})
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

func TestFromHTTP(t *testing.T) {
	h := http.Header{GRPCHeader: {"2S"}, "X-Deadline": {"1500"}}
	for _, c := range []struct {
		grpc   bool
		header string
		want   time.Duration // -1: none
	}{
		{false, "", -1}, {true, "", 2 * time.Second}, {false, "X-Deadline", 1500 * time.Millisecond},
		{true, "X-Deadline", 1500 * time.Millisecond}, {false, "X-Other", -1},
	} {
		d, ok := FromHTTP(h, c.grpc, c.header)
		if c.want < 0 && ok || c.want >= 0 && (!ok || d != c.want) {
			t.Errorf("FromHTTP(grpc %v, %q) = %v, %v; want %v", c.grpc, c.header, d, ok, c.want)
		}
	}
	if _, ok := FromHTTP(http.Header{"X-Deadline": {"1", "2"}}, false, "X-Deadline"); ok {
		t.Error("a header sent twice gave a deadline")
	}
}

func TestWaitIsTheSoonerDeadline(t *testing.T) {
	at := time.Unix(100, 0)
	var w Wait
	if d, ok := w.With(context.Background(), at).Deadline(); !ok || !d.Equal(at) {
		t.Errorf("without a parent's deadline: %v, %v; want %v", d, ok, at)
	}
	parent, cancel := context.WithDeadline(context.Background(), at.Add(-time.Second))
	defer cancel()
	ctx := w.With(parent, at)
	if d, _ := ctx.Deadline(); !d.Equal(at.Add(-time.Second)) {
		t.Errorf("under a sooner parent: %v; want the parent's", d)
	}
	cancel()
	if ctx.Err() == nil {
		t.Error("Err is not the parent's")
	}
}
