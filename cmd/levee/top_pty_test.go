//go:build linux

package main

import (
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// The terminal levee top runs in.
const ptyRows, ptyCols = 40, 120

// ptyTop is `levee top` running on a pseudo-terminal of its own.
type ptyTop struct {
	*proc
	ptmx, tty *os.File
	out       *logBuffer // everything written to the terminal
	before    *unix.Termios
}

// startPtyTop runs levee top with stdin, stdout and stderr a new
// 120x40 pty, as a session leader with it as its controlling terminal.
// The test keeps the pty's terminal side open to read its mode.
func startPtyTop(t *testing.T, args ...string) *ptyTop {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: ptyRows, Cols: ptyCols}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyTop{ptmx: ptmx, tty: tty, out: newLogBuffer(), before: before}
	p.proc = &proc{t: t, stdout: p.out, stderr: p.out, done: make(chan struct{})}
	p.cmd = exec.Command(leveeBin, append([]string{"top"}, args...)...)
	p.cmd.Env = append(testEnv(t), "TERM=xterm")
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	copied := make(chan struct{})
	t.Cleanup(func() { // after p.start's, which stops levee top
		tty.Close()
		ptmx.Close()
		<-copied
	})
	p.start()
	go func() { io.Copy(p.out, ptmx); close(copied) }() // ends when the pty closes
	return p
}

// waitScreen waits until cond holds of the screen as drawn so far.
func (p *ptyTop) waitScreen(what string, cond func(screen []string) bool) []string {
	p.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		text, changed := p.out.snapshot()
		screen, _ := render(text)
		if cond(screen) {
			return screen
		}
		select {
		case <-changed:
		case <-p.done:
			p.t.Fatalf("levee top exited (%v) before %s; screen:\n%s", p.waitErr, what, strings.Join(screen, "\n"))
		case <-deadline.C:
			p.t.Fatalf("not within %v: %s; screen:\n%s", waitTimeout, what, strings.Join(screen, "\n"))
		}
	}
}

// assertRestored waits for levee top's exit 0 and checks it left the
// alternate screen and put the terminal's mode back.
func (p *ptyTop) assertRestored() {
	p.t.Helper()
	if code := p.exitCode(); code != 0 {
		p.fatalf("levee top exited %d", code)
	}
	// The exit sequence was written before the exit; wait until read.
	deadline := time.Now().Add(waitTimeout)
	for {
		text := p.out.String()
		if _, alt := render(text); !alt && strings.LastIndex(text, screenLeave) > strings.LastIndex(text, screenEnter) {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("levee top did not leave the alternate screen; output ends %q", text[max(0, len(text)-200):])
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not an ordering sleep
	}
	after, err := unix.IoctlGetTermios(int(p.tty.Fd()), unix.TCGETS)
	if err != nil {
		p.t.Fatal(err)
	}
	if after.Lflag != p.before.Lflag || after.Iflag != p.before.Iflag || after.Oflag != p.before.Oflag || after.Cflag != p.before.Cflag {
		p.t.Fatalf("terminal mode not restored: before %+v, after %+v", p.before, after)
	}
}

// heavyFirst: the first row of app a's top clients is heavy-hitter.
func heavyFirst(screen []string) bool {
	for i, l := range screen {
		if strings.HasPrefix(l, "TOP CLIENTS of a ") {
			return i+2 < len(screen) && strings.HasSuffix(strings.TrimRight(screen[i+2], " "), " heavy-hitter")
		}
	}
	return false
}

// TestTopInTerminal: in a real terminal levee top draws the heavy client
// on the first row of the top clients, keeps the last frame and says so
// when levee goes away, and on q leaves the alternate screen, restores the
// terminal's mode and exits 0.
func TestTopInTerminal(t *testing.T) {
	skipTopOnRerun(t)
	s := startHeavyLoad(t, nil)
	p := startPtyTop(t, "--admin", s.admin, "--app", "a", "--window", "1m", "--interval", "200ms")
	screen := p.waitScreen("heavy-hitter first", heavyFirst)
	if !strings.HasPrefix(screen[0], "levee ") || !strings.Contains(screen[1], "role active") || !strings.HasPrefix(screen[6], "> a ") {
		t.Fatalf("header or apps table wrong:\n%s", strings.Join(screen, "\n"))
	}
	for _, l := range screen {
		if utf8.RuneCountInString(l) > ptyCols {
			t.Fatalf("a line wider than the terminal: %q", l)
		}
	}

	// b and w change what the clients are ranked by and over, at once.
	press := func(keys, title string) {
		t.Helper()
		if _, err := p.ptmx.Write([]byte(keys)); err != nil {
			t.Fatal(err)
		}
		p.waitScreen("a title of "+title, func(screen []string) bool { return indexPrefix(screen, title) >= 0 })
	}
	press("bw", "TOP CLIENTS of a by rejected over 10m")
	press("bbbww", "TOP CLIENTS of a by requests over 1m")
	p.waitScreen("heavy-hitter first again", heavyFirst)

	_ = s.cmd.Process.Kill() // by PID: the levee this test started
	<-s.done
	p.waitScreen("disconnected, last frame kept", func(screen []string) bool {
		return strings.HasPrefix(screen[2], "disconnected: ") && heavyFirst(screen)
	})

	if _, err := p.ptmx.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	p.assertRestored()
}

// TestTopInTerminalSIGTERM: SIGTERM restores the terminal as q does.
func TestTopInTerminalSIGTERM(t *testing.T) {
	skipTopOnRerun(t)
	s := startHeavyLoad(t, nil)
	p := startPtyTop(t, "--admin", s.admin, "--app", "a", "--window", "1m", "--interval", "200ms")
	p.waitScreen("heavy-hitter first", heavyFirst)
	p.signal(syscall.SIGTERM)
	p.assertRestored()
}

// csi is one control sequence: ESC [, parameters, a final byte.
var csi = regexp.MustCompile(`^\x1b\[([0-9;?]*)([A-Za-z])`)

// render plays output on a ptyRows x ptyCols screen, as far as levee top
// needs a terminal: cursor position (H), erase line (K) and display (J),
// the alternate screen (?1049h, ?1049l), text, CR and LF. It returns the
// screen shown, lines trimmed of trailing blanks, and whether the
// alternate screen is shown.
func render(output string) (screen []string, alt bool) {
	main, other := blank(), blank()
	grid := main
	row, col := 0, 0
	for i := 0; i < len(output); {
		if m := csi.FindStringSubmatch(output[i:]); m != nil {
			i += len(m[0])
			params := strings.Split(m[1], ";")
			switch m[2] {
			case "H":
				row, col = param(params, 0)-1, param(params, 1)-1
			case "K":
				if row >= 0 && row < ptyRows {
					grid[row] = []rune(strings.Repeat(" ", ptyCols))
				}
			case "J":
				if m[1] == "2" {
					copy(grid, blank())
				}
			case "h", "l":
				if m[1] == "?1049" {
					alt = m[2] == "h"
					grid = main
					if alt {
						grid = other
					}
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(output[i:])
		i += size
		switch r {
		case '\r':
			col = 0
		case '\n':
			row = min(row+1, ptyRows-1)
		default:
			if row >= 0 && row < ptyRows && col >= 0 && col < ptyCols {
				grid[row][col] = r
			}
			col++
		}
	}
	for _, l := range grid {
		screen = append(screen, strings.TrimRight(string(l), " "))
	}
	return screen, alt
}

func blank() [][]rune {
	g := make([][]rune, ptyRows)
	for i := range g {
		g[i] = []rune(strings.Repeat(" ", ptyCols))
	}
	return g
}

// param is the i-th numeric parameter, 1 when absent.
func param(params []string, i int) int {
	if i >= len(params) {
		return 1
	}
	n, err := strconv.Atoi(params[i])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
