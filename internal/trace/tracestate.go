package trace

// Tracestate bounds: the spec's 32 list members, and the 512 characters
// every vendor must propagate. levee passes a longer one on not at all
// rather than cut members it cannot rank.
const (
	MaxTracestateMembers = 32
	MaxTracestateLen     = 512
)

// TracestateCheck validates tracestate header values, which may be split
// over several header fields (combined as one list, RFC 9110 §5.3). The
// zero value is ready; Add each value, then OK. It allocates nothing.
type TracestateCheck struct {
	members, length int
	bad             bool
	fields          int
}

// Add checks one tracestate header value.
func (c *TracestateCheck) Add(v []byte) { addTracestate(c, v) }

// AddString is Add for a string.
func (c *TracestateCheck) AddString(v string) { addTracestate(c, v) }

func addTracestate[T string | []byte](c *TracestateCheck, v T) {
	if c.fields > 0 {
		c.length++ // the comma that joins two fields
	}
	c.fields++
	c.length += len(v)
	start := 0
	for i := 0; i <= len(v); i++ {
		if i < len(v) && v[i] != ',' {
			continue
		}
		m := trimOWS(v[start:i])
		start = i + 1
		if len(m) == 0 {
			continue // empty members are allowed and ignored
		}
		c.members++
		if !validMember(m) {
			c.bad = true
		}
	}
	if c.members > MaxTracestateMembers || c.length > MaxTracestateLen {
		c.bad = true
	}
}

// OK reports whether every value added so far is a valid tracestate
// within the bounds, and there was at least one.
func (c *TracestateCheck) OK() bool { return c.fields > 0 && !c.bad }

// Fields is how many values were added.
func (c *TracestateCheck) Fields() int { return c.fields }

func trimOWS[T string | []byte](s T) T {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// validMember checks key "=" value: key is a simple key (lcalpha then up
// to 255 of lcalpha, digit, _ - * /) or tenant@system (tenant up to 241,
// starting with lcalpha or a digit; system up to 14, starting lcalpha);
// value is 1..256 printable ASCII without ',' or '=', not ending in a space.
func validMember[T string | []byte](m T) bool {
	eq := -1
	for i := range len(m) {
		if m[i] == '=' {
			eq = i
			break
		}
	}
	if eq <= 0 {
		return false
	}
	return validKey(m[:eq]) && validValue(m[eq+1:])
}

func validKey[T string | []byte](k T) bool {
	at := -1
	for i := range len(k) {
		c := k[i]
		switch {
		case c == '@':
			if at >= 0 {
				return false
			}
			at = i
		case !keyChar(c):
			return false
		}
	}
	if at < 0 {
		return len(k) <= 256 && isLower(k[0])
	}
	tenant, system := k[:at], k[at+1:]
	return len(tenant) >= 1 && len(tenant) <= 241 && (isLower(tenant[0]) || isDigit(tenant[0])) &&
		len(system) >= 1 && len(system) <= 14 && isLower(system[0])
}

func keyChar(c byte) bool {
	return isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '*' || c == '/'
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func validValue[T string | []byte](v T) bool {
	if len(v) == 0 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := range len(v) {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}
