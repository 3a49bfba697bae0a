package membuf

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFillReadsUpToTheLimit(t *testing.T) {
	b := NewBudget(1 << 20)
	for _, tc := range []struct {
		name     string
		body     string
		limit    int
		wantDone bool
		want     string
	}{
		{"shorter than the limit", "hello", 10, true, "hello"},
		{"longer than the limit", "hello world", 5, false, "hello"},
		{"empty", "", 10, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf Buffer
			buf.Init(b)
			// One byte a read: Fill must keep reading, never loop on a short read.
			done, err := buf.Fill(iotest.OneByteReader(strings.NewReader(tc.body)), tc.limit)
			if err != nil || done != tc.wantDone || string(buf.Bytes()) != tc.want {
				t.Fatalf("Fill = %v, %v, %q; want %v, nil, %q", done, err, buf.Bytes(), tc.wantDone, tc.want)
			}
			buf.Free()
		})
	}
	if b.Used() != 0 {
		t.Fatalf("budget holds %d bytes after every buffer was freed", b.Used())
	}
}

func TestFillGrowsAsBytesComeAndStopsAtTheBudget(t *testing.T) {
	b := NewBudget(64 << 10)
	var buf Buffer
	buf.Init(b)
	// A large limit is not charged up front: a first buffer of 16 KiB, the
	// rest as the bytes come.
	done, err := buf.Fill(strings.NewReader("abc"), 1<<20)
	if !done || err != nil || b.Used() != startMax {
		t.Fatalf("3 bytes of a 1 MiB limit: done %v err %v, budget used %d; want %d", done, err, b.Used(), startMax)
	}
	buf.Free()
	// A body past the budget fills what the budget gives and stops, its
	// bytes kept and in order; the rest is left unread.
	body := bytes.Repeat([]byte("0123456789"), 20<<10) // 200 KiB
	r := bytes.NewReader(body)
	buf.Init(b)
	done, err = buf.Fill(r, 1<<20)
	if done || err != nil {
		t.Fatalf("Fill past the budget = %v, %v; want a stop without error", done, err)
	}
	if b.Used() > b.Max() || buf.Len() == 0 || !bytes.Equal(buf.Bytes(), body[:buf.Len()]) {
		t.Fatalf("held %d bytes (budget %d of %d); want a prefix of the body within the budget", buf.Len(), b.Used(), b.Max())
	}
	if rest, _ := io.ReadAll(r); buf.Len()+len(rest) != len(body) {
		t.Fatalf("held %d + unread %d != %d", buf.Len(), len(rest), len(body))
	}
	if b.Short() == 0 {
		t.Fatal("the budget's shortage was not counted")
	}
	buf.Free()
	if b.Used() != 0 {
		t.Fatalf("budget holds %d after Free", b.Used())
	}
}

func TestFillPassesOnReadErrors(t *testing.T) {
	var buf Buffer
	buf.Init(NewBudget(1 << 20))
	boom := errors.New("boom")
	done, err := buf.Fill(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom)), 100)
	if done || !errors.Is(err, boom) || string(buf.Bytes()) != "ab" {
		t.Fatalf("Fill = %v, %v, %q; want false, boom, \"ab\"", done, err, buf.Bytes())
	}
	buf.Free()
}

func TestReserveAndAppend(t *testing.T) {
	b := NewBudget(1 << 20)
	var buf Buffer
	buf.Init(b)
	if !buf.Reserve(100 << 10) {
		t.Fatal("Reserve within the budget failed")
	}
	if b.Used() != 128<<10 {
		t.Fatalf("Reserve(100 KiB) charged %d; want one 128 KiB buffer", b.Used())
	}
	if !buf.Append(make([]byte, 100<<10)) || buf.Append(make([]byte, 29<<10)) {
		t.Fatal("Append must take what fits and refuse what does not")
	}
	buf.Free()
	if buf.Reserve(2<<20) || b.Used() != 0 {
		t.Fatalf("Reserve past the budget = true or charged %d; want false, nothing held", b.Used())
	}
	buf.Free()
}

// A budget made smaller by a reload lets no buffer grow until it is back
// under.
func TestSetMax(t *testing.T) {
	b := NewBudget(1 << 20)
	var buf Buffer
	buf.Init(b)
	buf.Reserve(512 << 10)
	b.SetMax(256 << 10)
	var other Buffer
	other.Init(b)
	if other.Reserve(1) {
		t.Fatal("a buffer grew past a budget made smaller")
	}
	buf.Free()
	if !other.Reserve(1) {
		t.Fatal("no buffer can grow once the budget is back under its max")
	}
	other.Free()
}

func BenchmarkFillSmall(b *testing.B) {
	budget := NewBudget(1 << 30)
	body := make([]byte, 1000)
	r := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(body)
		var buf Buffer
		buf.Init(budget)
		buf.Fill(r, 64<<10)
		buf.Free()
	}
}
