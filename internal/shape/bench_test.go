package shape

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// batchBody returns a body of about size bytes whose "uris" array holds n
// string items, with a nested object beside it.
func batchBody(n, size int) []byte {
	item := max(size/n-3, 8)
	var b strings.Builder
	b.WriteString(`{"meta":{"client":"bench","tags":["a","b"],"n":12.5e3},"uris":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		s := fmt.Sprintf("https://example.com/bucket/object-%08d/", i)
		for len(s) < item {
			s += "x"
		}
		b.WriteString(`"` + s[:item] + `"`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkBatchReader counts a 1 MB body with 10,000 items through a reused
// reader, reading 32 KB at a time as a proxy copies a body.
func BenchmarkBatchReader(b *testing.B) {
	data := batchBody(10000, 1<<20)
	c := mustNew(b, Limits{Batch: Batch{JSONField: "uris", Max: 10000}})
	body := &bytesReader{}
	r := c.BatchReader(body)
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		body.b = data
		r.Reset(body)
		for {
			_, err := r.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	if r.Count() != 10000 {
		b.Fatalf("count = %d", r.Count())
	}
}

// BenchmarkBatchReaderReject is the incident: a 20,000-item body refused at
// item 101, with a new reader per request as the server makes one.
func BenchmarkBatchReaderReject(b *testing.B) {
	data := batchBody(20000, 2<<20)
	c := mustNew(b, Limits{Batch: Batch{JSONField: "uris", Max: 100}})
	body := &bytesReader{}
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	for b.Loop() {
		body.b = data
		if _, err := c.BatchReader(body).Read(buf); err == nil {
			b.Fatal("no violation")
		}
	}
}

// BenchmarkJSONValid is the standard library's validator on the same body,
// for scale.
func BenchmarkJSONValid(b *testing.B) {
	data := batchBody(10000, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if !jsonValid(data) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkCheckTarget(b *testing.B) {
	c := mustNew(b, Limits{MaxURLBytes: 8192, MaxQueryValues: 64})
	target := "/v1/buckets/photos/objects?prefix=2024/&delimiter=/&max-keys=1000&continuation-token=abc"
	b.ReportAllocs()
	for b.Loop() {
		if c.CheckTarget(target) != nil {
			b.Fatal("refused")
		}
	}
}

// BenchmarkCheckHeaders includes HeaderSize over a net/http-style map of
// six fields; the map walk is most of it.
func BenchmarkCheckHeaders(b *testing.B) {
	c := mustNew(b, Limits{MaxHeaderBytes: 32 << 10, MaxHeaderCount: 100})
	h := map[string][]string{
		"Accept": {"*/*"}, "User-Agent": {"bench/1.0"}, "X-Api-Key": {"k-123456"},
		"Content-Type": {"application/json"}, "Accept-Encoding": {"gzip"}, "Content-Length": {"1234"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if c.CheckHeaders(HeaderSize(h)) != nil {
			b.Fatal("refused")
		}
	}
}
