package topview

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/")

func loadSnapshot(t *testing.T) *Snapshot {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := new(Snapshot)
	if err := json.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRenderGolden: the frames of testdata/snapshot.json on a 100x30
// terminal and as plain text match testdata/*.txt (go test -update
// rewrites them).
func TestRenderGolden(t *testing.T) {
	s := loadSnapshot(t)
	for _, tc := range []struct {
		file          string
		view          View
		width, height int
	}{
		{"frame-100x30.txt", View{Admin: "http://127.0.0.1:9901", Interval: time.Second}, 100, 30},
		{"frame-60x14.txt", View{Admin: "http://127.0.0.1:9901", Interval: time.Second, Selected: "api",
			Status: "disconnected: topview: admin unreachable (retrying every 1s)"}, 60, 14},
		{"plain.txt", View{Admin: "http://127.0.0.1:9901"}, 0, 0},
	} {
		got := strings.Join(Render(s, tc.view, tc.width, tc.height), "\n") + "\n"
		path := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.file, got, want)
		}
	}
}

// TestRenderFits: at every size, no line is wider than the terminal, there
// are no more lines than rows, and no line holds a control character.
func TestRenderFits(t *testing.T) {
	s := loadSnapshot(t)
	views := []View{
		{Interval: time.Second},
		{Interval: time.Second, Selected: "a-tenant-with-a-very-long-name-indeed", Status: "disconnected: \x1b[31m"},
	}
	for _, v := range views {
		for w := 1; w <= 130; w++ {
			for h := 1; h <= 45; h++ {
				lines := Render(s, v, w, h)
				if len(lines) > h {
					t.Fatalf("%dx%d: %d lines", w, h, len(lines))
				}
				for _, l := range lines {
					if Width(l) > w || Sanitize(l) != l {
						t.Fatalf("%dx%d: line %q is %d wide or unsanitized", w, h, l, Width(l))
					}
				}
			}
		}
	}
	for _, s := range []*Snapshot{nil, {}} { // before the first snapshot, and no apps
		if lines := Render(s, View{}, 80, 24); len(lines) == 0 || len(lines) > 24 {
			t.Fatalf("empty snapshot: %q", lines)
		}
	}
}

// TestRenderKeepsSelectionVisible: on a short screen the apps table
// scrolls to the selected app.
func TestRenderKeepsSelectionVisible(t *testing.T) {
	s := loadSnapshot(t)
	sel := "a-tenant-with-a-very-long-name-indeed"
	frame := strings.Join(Render(s, View{Selected: sel}, 100, 12), "\n")
	if !strings.Contains(frame, "> a-tenant-with-a-very-l") {
		t.Fatalf("selected app not shown:\n%s", frame)
	}
}

// TestRenderSanitizesClients: a client name holding escape sequences and
// control and bidi characters is printed escaped, never raw.
func TestRenderSanitizesClients(t *testing.T) {
	frame := strings.Join(Render(loadSnapshot(t), View{}, 0, 0), "\n")
	if strings.ContainsAny(frame, "\x1b\x07\u202e") {
		t.Fatalf("raw control characters in the frame:\n%q", frame)
	}
	if want := `\x1b[2J\x1b]0;pwned\aevil\u202e`; !strings.Contains(frame, want) {
		t.Fatalf("frame lacks %s:\n%s", want, frame)
	}
}

// TestSnapshotRoundTrip: a snapshot marshals as read, fields the typed
// view does not know included.
func TestSnapshotRoundTrip(t *testing.T) {
	s := loadSnapshot(t)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"a_field_added_later":{"kept":true}`) {
		t.Fatalf("unknown field lost: %s", b)
	}
	var again Snapshot
	if err := json.Unmarshal(b, &again); err != nil || again.Top.Clients[0].Client != "batch-importer" || again.App.Name != "photos" || len(again.Apps) != 3 {
		t.Fatalf("round trip: %+v, %v", again, err)
	}
}
