package catalog

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkLazyLookup is one goroutine looking up cached hosts in turn
// (BenchmarkCatalogCachedLookup in sqlitestore runs the 1M-app version).
func BenchmarkLazyLookup(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		st := hostStore{}
		hosts := make([]string, n)
		for i := range n {
			hosts[i] = fmt.Sprintf("h%d.example", i)
			st[hosts[i]] = Record{Name: fmt.Sprint("app", i), Version: 1, Hosts: []string{hosts[i]}, Paths: []string{"/"}}
		}
		l := NewLazy(LazyOptions[*int]{Store: st, MaxApps: n, Compose: func(Record) (*int, error) { return new(int), nil }})
		for _, h := range hosts {
			if _, err := l.Load(context.Background(), h, "/"); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("apps=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := l.Lookup(hosts[i%n], "/x"); !ok {
					b.Fatal("miss")
				}
				i += 7919
			}
		})
		l.Close()
	}
}

// hostStore is a Store of one exact host per app.
type hostStore map[string]Record

func (s hostStore) ForHost(_ context.Context, host string) ([]Record, error) {
	if r, ok := s[host]; ok {
		return []Record{r}, nil
	}
	return nil, nil
}
func (hostStore) Apps(context.Context, []string) ([]Record, error)      { return nil, nil }
func (hostStore) Changes(context.Context, int64, int) ([]Change, error) { return nil, nil }
func (hostStore) Version(context.Context) (int64, error)                { return 0, nil }
