package spill

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

func dirEntries(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func TestOpenUnlinksAndCloseGivesBack(t *testing.T) {
	dir := t.TempDir()
	b := NewBudget(dir, 100<<20)
	f, err := b.Open(60<<20, 70<<20, 1000<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := dirEntries(t, dir); n != 0 {
		t.Fatalf("%d files in the spill dir after Open; want 0 (unlinked at creation)", n)
	}
	if b.Used() != 60<<20 || b.Spilled() != 1 {
		t.Fatalf("Used %d, Spilled %d; want 60MiB, 1", b.Used(), b.Spilled())
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f.Close() // twice: given back once
	if b.Used() != 0 {
		t.Fatalf("Used %d after Close; want 0", b.Used())
	}
	if _, err := f.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Read after Close: %v; want os.ErrClosed", err)
	}
}

func TestOpenRefusesAndCounts(t *testing.T) {
	dir := t.TempDir()
	const k = MinCharge
	b := NewBudget(dir, 100*k)
	held, err := b.Open(80*k, 80*k, 1000*k)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		name               string
		b                  *Budget
		size, total, limit int64
		reason             string
	}{
		{"cap off", b, 10, 10, 0, ReasonOff},
		{"budget off", NewBudget(dir, 0), 10, 10, 1000, ReasonOff},
		{"over the cap", b, 10, 1001 * k, 1000 * k, ReasonSize},
		{"budget spent", b, 30 * k, 30 * k, 1000 * k, ReasonBudget},
		// 10 bytes are charged MinCharge: each file holds a descriptor.
		{"budget spent by small files", NewBudget(dir, k-1), 10, 10, 1000, ReasonBudget},
		{"no such dir", NewBudget(dir+"/missing", 100*k), 10, 10, 1000, ReasonError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := tc.b.Used()
			f, err := tc.b.Open(tc.size, tc.total, tc.limit)
			var r *Refusal
			if f != nil || !errors.As(err, &r) || r.Reason != tc.reason {
				t.Fatalf("Open = %v, %v; want a %q refusal", f, err, tc.reason)
			}
			if tc.b.Refused(tc.reason) != 1 || tc.b.Used() != used {
				t.Fatalf("Refused(%q) = %d, Used %d; want 1, %d (unchanged)", tc.reason, tc.b.Refused(tc.reason), tc.b.Used(), used)
			}
		})
	}
	if n := dirEntries(t, dir); n != 0 {
		t.Fatalf("%d files left in the spill dir", n)
	}
}

func TestFillThenReadKeepsEveryByte(t *testing.T) {
	b := NewBudget(t.TempDir(), 1<<20)
	body := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: past Fill's read buffer
	body = append(body, "tail"...)
	f, err := b.Open(int64(len(body)), int64(len(body)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// One byte a read, and more after the size: Fill reads no further.
	r := io.MultiReader(iotest.OneByteReader(bytes.NewReader(body)), strings.NewReader("EXTRA"))
	if err := f.Fill(r); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "EXTRA" {
		t.Fatalf("Fill read past the size: %q left", rest)
	}
	got, err := io.ReadAll(iotest.OneByteReader(f))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, %v; want the %d written", len(got), err, len(body))
	}
}

func TestFillFailsOnAShortOrBrokenBody(t *testing.T) {
	b := NewBudget(t.TempDir(), 1<<20)
	boom := errors.New("backend reset")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"short", strings.NewReader("abc"), io.ErrUnexpectedEOF},
		{"broken", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := b.Open(10, 10, 100)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Fill(tc.r); !errors.Is(err, tc.want) {
				t.Fatalf("Fill = %v; want %v", err, tc.want)
			}
			f.Close()
		})
	}
	if b.Used() != 0 {
		t.Fatalf("Used %d after every file closed on error; want 0", b.Used())
	}
}

func TestWritePastSizeOverflows(t *testing.T) {
	b := NewBudget(t.TempDir(), MinCharge)
	f, err := b.Open(4, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.Write([]byte("abcdef")); n != 4 || !errors.Is(err, ErrOverflow) {
		t.Fatalf("Write = %d, %v; want 4, ErrOverflow", n, err)
	}
	if got, _ := io.ReadAll(f); string(got) != "abcd" {
		t.Fatalf("read back %q; want abcd", got)
	}
}
