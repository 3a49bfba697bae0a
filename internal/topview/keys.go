package topview

// Key is a key `levee top` acts on.
type Key int

// The keys, and what they do in cmd/levee.
const (
	KeyNone   Key = iota
	KeyQuit       // q, Q, Ctrl-C, Ctrl-D
	KeyDown       // j, ↓: the next app
	KeyUp         // k, ↑: the previous app
	KeyBy         // b: the next measure (requests, rejected, bytes, items)
	KeyWindow     // w: the next window (10s, 1m, 10m)
)

// ParseKeys reads the keys in b, bytes read from a terminal in raw mode.
// Arrow keys are the escape sequences ESC [ A and ESC [ B (or ESC O A,
// ESC O B in application mode); any other byte or sequence is skipped.
func ParseKeys(b []byte) []Key {
	var keys []Key
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 'q', 'Q', 0x03, 0x04:
			keys = append(keys, KeyQuit)
		case 'j':
			keys = append(keys, KeyDown)
		case 'k':
			keys = append(keys, KeyUp)
		case 'b':
			keys = append(keys, KeyBy)
		case 'w':
			keys = append(keys, KeyWindow)
		case 0x1b:
			if i+2 < len(b) && (b[i+1] == '[' || b[i+1] == 'O') {
				switch b[i+2] {
				case 'A':
					keys = append(keys, KeyUp)
				case 'B':
					keys = append(keys, KeyDown)
				}
				i += 2
			}
		}
	}
	return keys
}

// Next is the element after cur in list, round to the first; the first
// when cur is not in list.
func Next(list []string, cur string) string {
	for i, s := range list {
		if s == cur {
			return list[(i+1)%len(list)]
		}
	}
	return list[0]
}
