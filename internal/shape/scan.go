package shape

import "encoding/binary"

// MaxDepth is the deepest nesting of JSON arrays and objects a BatchReader
// accepts; the top-level object is depth 1. It bounds the reader's state.
const MaxDepth = 512

// scanState is where the scanner is in the JSON grammar.
type scanState uint8

const (
	sBegin     scanState = iota // before the top-level value
	sValue                      // a value must start (after ':' or an array's ',')
	sFirstElem                  // after '[': a value or ']'
	sFirstKey                   // after '{': a key or '}'
	sKey                        // after an object's ',': a key
	sColon                      // after a key: ':'
	sAfter                      // after a value: ',' or the container's close
	sEnd                        // after the top-level object: whitespace only
	sString                     // inside a string
	sEscape                     // after a '\' in a string
	sHex                        // inside the four hex digits of \uXXXX
	sNeg                        // after a number's '-'
	sZero                       // after a number's leading 0
	sInt                        // in a number's integer digits
	sDot                        // after a number's '.'
	sFrac                       // in a number's fraction digits
	sExp                        // after a number's 'e'
	sExpSign                    // after the exponent's sign
	sExpDigits                  // in the exponent's digits
	sLiteral                    // inside true, false or null
)

// scanner is an incremental JSON validator that counts the items of the
// batch field. Its state is O(MaxDepth) bits, fixed in size.
type scanner struct {
	spec  *batchSpec
	count int
	depth int                   // open arrays and objects
	array [MaxDepth / 64]uint64 // bit d-1 set: the container at depth d is an array
	state scanState

	isKey      bool   // the open string is an object key
	fieldValue bool   // the next value is a top-level value of the batch field
	inBatch    bool   // the array at depth 2 is a value of the batch field
	literal    string // the rest of true, false or null
	hexLeft    uint8  // hex digits still due in \uXXXX
	hexVal     rune
	key        keyMatcher // matches top-level keys against spec.field
}

// Byte classes.
var (
	// plain marks the bytes a string may hold as they are: not '"', not '\',
	// not a control character.
	plain [256]bool
	// valueStart marks the bytes a JSON value may start with.
	valueStart [256]bool
)

func init() {
	for c := 0x20; c < 256; c++ {
		plain[c] = c != '"' && c != '\\'
	}
	for _, c := range []byte(`{["-0123456789tfn`) {
		valueStart[c] = true
	}
}

// SWAR constants: a byte repeated in every lane of a uint64.
const (
	lanes01    = 0x0101010101010101
	lanes80    = 0x8080808080808080
	lanesQuote = '"' * lanes01
	lanesSlash = '\\' * lanes01
	lanes20    = 0x20 * lanes01
)

// skipPlain returns the offset of the first byte at or after i that a
// string may not hold as it is ('"', '\', a control byte), or len(p). It
// tests eight bytes at a time: (x - 0x01…) &^ x & 0x80… is non-zero
// exactly when some byte of x is zero, and (x - n…) &^ x & 0x80… when some
// byte is below n (n ≤ 0x80).
func skipPlain(p []byte, i int) int {
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		q := x ^ lanesQuote
		b := x ^ lanesSlash
		if ((q-lanes01)&^q|(b-lanes01)&^b|(x-lanes20)&^x)&lanes80 != 0 {
			break
		}
	}
	for i < len(p) && plain[p[i]] {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scan consumes p. On a violation it returns the offset of the offending
// byte (the bytes before it are good) and the violation; the scanner must
// not be used again.
func (s *scanner) scan(p []byte) (int, *Violation) {
	for i := 0; i < len(p); {
		c := p[i]
		switch s.state {
		case sString:
			if !s.key.active {
				i = skipPlain(p, i)
				if i == len(p) {
					return i, nil
				}
				c = p[i]
			}
			switch {
			case c == '"':
				s.key.flushBytes()
				s.endString()
			case c == '\\':
				s.key.flushBytes()
				s.state = sEscape
			case c < 0x20:
				return i, errSyntax
			default:
				s.key.byte(c)
			}
			i++
			continue
		case sEscape:
			var r rune
			switch c {
			case '"', '\\', '/':
				r = rune(c)
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			case 'u':
				s.state, s.hexLeft, s.hexVal = sHex, 4, 0
				i++
				continue
			default:
				return i, errSyntax
			}
			s.key.escaped(r)
			s.state = sString
			i++
			continue
		case sHex:
			var d byte
			switch {
			case isDigit(c):
				d = c - '0'
			case 'a' <= c && c <= 'f':
				d = c - 'a' + 10
			case 'A' <= c && c <= 'F':
				d = c - 'A' + 10
			default:
				return i, errSyntax
			}
			s.hexVal = s.hexVal<<4 | rune(d)
			if s.hexLeft--; s.hexLeft == 0 {
				s.key.utf16(s.hexVal)
				s.state = sString
			}
			i++
			continue
		}
		if isSpace(c) && s.state <= sEnd {
			i++
			continue
		}
		reprocess, v := s.step(c)
		if v != nil {
			return i, v
		}
		if !reprocess {
			i++
		}
	}
	return len(p), nil
}

// step handles one byte outside strings that is not insignificant
// whitespace between tokens. reprocess says the byte ended a number and must
// be handled again in the new state.
func (s *scanner) step(c byte) (reprocess bool, v *Violation) {
	switch s.state {
	case sBegin:
		if c == '{' {
			return false, s.push(false)
		}
		if valueStart[c] {
			return false, errNotObject
		}
		return false, errSyntax
	case sValue:
		return false, s.beginValue(c)
	case sFirstElem:
		if c == ']' {
			s.pop()
			return false, nil
		}
		return false, s.beginValue(c)
	case sFirstKey:
		if c == '}' {
			s.pop()
			return false, nil
		}
		return false, s.beginKey(c)
	case sKey:
		return false, s.beginKey(c)
	case sColon:
		if c != ':' {
			return false, errSyntax
		}
		s.state = sValue
		return false, nil
	case sAfter:
		return false, s.afterValue(c)
	case sEnd:
		return false, errSyntax
	case sLiteral:
		if c != s.literal[0] {
			return false, errSyntax
		}
		if s.literal = s.literal[1:]; s.literal == "" {
			s.state = sAfter
		}
		return false, nil
	}
	return s.number(c)
}

// number advances through a number's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number(c byte) (reprocess bool, v *Violation) {
	switch s.state {
	case sNeg:
		switch {
		case c == '0':
			s.state = sZero
		case isDigit(c):
			s.state = sInt
		default:
			return false, errSyntax
		}
		return false, nil
	case sInt:
		if isDigit(c) {
			return false, nil
		}
		fallthrough
	case sZero:
		switch c {
		case '.':
			s.state = sDot
			return false, nil
		case 'e', 'E':
			s.state = sExp
			return false, nil
		}
	case sDot:
		if !isDigit(c) {
			return false, errSyntax
		}
		s.state = sFrac
		return false, nil
	case sFrac:
		if isDigit(c) {
			return false, nil
		}
		if c == 'e' || c == 'E' {
			s.state = sExp
			return false, nil
		}
	case sExp:
		if c == '+' || c == '-' {
			s.state = sExpSign
			return false, nil
		}
		fallthrough
	case sExpSign:
		if !isDigit(c) {
			return false, errSyntax
		}
		s.state = sExpDigits
		return false, nil
	case sExpDigits:
		if isDigit(c) {
			return false, nil
		}
	default:
		panic("shape: scanner in unknown state")
	}
	// The number is complete; c belongs to what follows it.
	s.state = sAfter
	return true, nil
}

// beginValue starts a value with c, counting it when it is an item of the
// batch.
func (s *scanner) beginValue(c byte) *Violation {
	if !valueStart[c] {
		return errSyntax
	}
	if s.inBatch && s.depth == 2 {
		s.count++
		if s.count > s.spec.max {
			return s.spec.tooMany
		}
	}
	batch := false
	if s.fieldValue {
		s.fieldValue = false
		switch c {
		case '[':
			batch = true
		case 'n':
		default:
			return s.spec.notArray
		}
	}
	switch c {
	case '{':
		return s.push(false)
	case '[':
		if v := s.push(true); v != nil {
			return v
		}
		if batch {
			s.inBatch = true
		}
	case '"':
		s.state = sString
	case '-':
		s.state = sNeg
	case '0':
		s.state = sZero
	case 't':
		s.state, s.literal = sLiteral, "rue"
	case 'f':
		s.state, s.literal = sLiteral, "alse"
	case 'n':
		s.state, s.literal = sLiteral, "ull"
	default: // 1-9
		s.state = sInt
	}
	return nil
}

// beginKey starts an object key with c, matching it against the batch field
// when the object is the top-level one.
func (s *scanner) beginKey(c byte) *Violation {
	if c != '"' {
		return errSyntax
	}
	s.state = sString
	s.isKey = true
	if s.depth == 1 {
		s.key.start(s.spec.field)
	}
	return nil
}

// endString closes a string: a key expects its ':', a value is done.
func (s *scanner) endString() {
	if !s.isKey {
		s.state = sAfter
		return
	}
	s.isKey = false
	s.state = sColon
	if s.depth == 1 {
		s.fieldValue = s.key.matched()
	}
}

// afterValue expects the separator or the close of the open container.
func (s *scanner) afterValue(c byte) *Violation {
	inArray := s.topIsArray()
	switch {
	case c == ',' && inArray:
		s.state = sValue
	case c == ',':
		s.state = sKey
	case c == ']' && inArray, c == '}' && !inArray:
		s.pop()
	default:
		return errSyntax
	}
	return nil
}

func (s *scanner) topIsArray() bool {
	d := s.depth - 1
	return s.array[d/64]&(1<<(d%64)) != 0
}

func (s *scanner) push(array bool) *Violation {
	if s.depth == MaxDepth {
		return errTooDeep
	}
	d := s.depth
	if array {
		s.array[d/64] |= 1 << (d % 64)
		s.state = sFirstElem
	} else {
		s.array[d/64] &^= 1 << (d % 64)
		s.state = sFirstKey
	}
	s.depth++
	return nil
}

func (s *scanner) pop() {
	if s.depth == 2 {
		s.inBatch = false
	}
	s.depth--
	if s.depth == 0 {
		s.state = sEnd
	} else {
		s.state = sAfter
	}
}

// finish checks the end of the body: it must be empty (only whitespace) or
// hold one complete object.
func (s *scanner) finish() *Violation {
	if s.state == sBegin || s.state == sEnd {
		return nil
	}
	return errTruncated
}
