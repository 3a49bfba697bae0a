package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
	"github.com/leveeproxy/levee/internal/topview"
)

// The escape sequences of the full-screen view: the alternate screen
// (xterm's 1049, which also saves and restores the cursor) with the
// cursor hidden, and back. Tests look for screenLeave.
const (
	screenEnter = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"
	screenLeave = "\x1b[?25h\x1b[?1049l"
)

// topUI is the interactive view: what is selected, the last snapshot,
// and the state of the connection. It is used by one goroutine, run's.
type topUI struct {
	client          *topview.Client
	opts            topOptions
	out             *os.File
	sel, by, window string // sel "": the busiest app
	last            *topview.Snapshot
	status          string // "": the last fetch worked
}

// fetched is one Fetch's result.
type fetched struct {
	snap *topview.Snapshot
	err  error
}

// run draws until q or ctx ends. It polls the API every interval, and at
// once after a key changes what is asked; one fetch at most is in flight,
// and run waits for it (bounded by fetchTimeout) before it returns. The
// terminal is restored on every return.
func (u *topUI) run(ctx context.Context, in *os.File) error {
	t, err := openTerminal(u.out, in)
	if err != nil {
		return err
	}
	defer t.close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	results := make(chan fetched, 1) // one fetch in flight at most: never blocks
	inflight, stale := false, false
	fetch := func() {
		if inflight {
			stale = true
			return
		}
		inflight = true
		q := u.opts.query
		q.App, q.By, q.Window = u.sel, u.by, u.window
		wg.Go(func() {
			s, err := u.client.Fetch(ctx, q)
			results <- fetched{s, err}
		})
	}
	tick := time.NewTicker(u.opts.interval)
	defer tick.Stop()
	fetch()
	u.draw(t)
	for {
		select {
		case <-ctx.Done():
			return nil
		case b, ok := <-t.keys:
			if !ok { // stdin ended: no more keys, the view goes on
				t.keys = nil
				continue
			}
			changed := false
			for _, k := range topview.ParseKeys(b) {
				if k == topview.KeyQuit {
					return nil
				}
				changed = u.key(k) || changed
			}
			if changed {
				u.draw(t)
				fetch()
			}
		case r := <-results:
			inflight = false
			if r.err != nil {
				u.status = statusOf(r.err, u.opts.interval)
			} else {
				u.last, u.status = r.snap, ""
			}
			u.draw(t)
			if stale {
				stale = false
				fetch()
			}
		case <-tick.C:
			if !inflight {
				fetch()
			}
		case <-t.resized:
			u.draw(t)
		}
	}
}

// statusOf is the header's line for a failed fetch; the last frame stays.
func statusOf(err error, every time.Duration) string {
	what := "error"
	if errors.Is(err, topview.ErrUnreachable) {
		what = "disconnected"
	}
	return fmt.Sprintf("%s: %v (retrying every %v)", what, err, every)
}

// key applies k and reports whether what is asked of the API changed.
func (u *topUI) key(k topview.Key) bool {
	switch k {
	case topview.KeyDown, topview.KeyUp:
		if u.last == nil || len(u.last.Apps) == 0 {
			return false
		}
		cur := u.sel
		if cur == "" && u.last.App != nil {
			cur = u.last.App.Name
		}
		i := slices.IndexFunc(u.last.Apps, func(a apps.AppSummary) bool { return a.Name == cur })
		switch {
		case i < 0:
			i = 0
		case k == topview.KeyDown:
			i = min(i+1, len(u.last.Apps)-1)
		default:
			i = max(i-1, 0)
		}
		if u.last.Apps[i].Name == cur {
			return false
		}
		u.sel = u.last.Apps[i].Name
	case topview.KeyBy:
		u.by = topview.Next(topk.Dimensions[:], u.by)
	case topview.KeyWindow:
		u.window = topview.Next(topk.WindowNames[:], u.window)
	default:
		return false
	}
	return true
}

// draw writes one frame: every row of the screen is cleared and redrawn,
// each line cut to the width, so nothing wraps or scrolls.
func (u *topUI) draw(t *terminal) {
	w, h, err := term.GetSize(int(u.out.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		w, h = 80, 24
	}
	lines := topview.Render(u.last, topview.View{
		Admin: u.opts.admin, Selected: u.sel, By: u.by, Window: u.window,
		Interval: u.opts.interval, Status: u.status,
	}, w, h)
	var b bytes.Buffer
	for row := range h {
		b.WriteString("\x1b[" + strconv.Itoa(row+1) + ";1H\x1b[2K")
		if row < len(lines) {
			b.WriteString(lines[row])
		}
	}
	t.out.Write(b.Bytes()) // a lost frame is redrawn next interval
}
