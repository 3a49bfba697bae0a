package trace

import "testing"

// FuzzTraceparent: a value that parses writes back to one that parses to
// the same context, and never panics.
func FuzzTraceparent(f *testing.F) {
	for _, s := range []string{validTP, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, ok := ParseTraceparent(s)
		if !ok {
			return
		}
		if !sc.TraceID.IsValid() || !sc.SpanID.IsValid() {
			t.Fatalf("%q: parsed with a zero id", s)
		}
		out := AppendTraceparent(nil, sc)
		sc2, ok := ParseTraceparent(out)
		if !ok || sc2 != sc || len(out) != TraceparentLen {
			t.Fatalf("%q → %q → %v %v", s, out, sc2, ok)
		}
		if s[:2] == "00" && string(out) != s {
			t.Fatalf("version 00 %q written back as %q", s, out)
		}
		var c TracestateCheck
		c.AddString(s) // no panic on any input
	})
}
