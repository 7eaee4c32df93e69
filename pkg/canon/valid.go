package canon

import "encoding/binary"

// Valid reports whether b is exactly one JSON text, with the answer of encoding/json's Valid
// on every input: the same grammar, strings that may hold any byte but a control character
// (invalid UTF-8 included), and the same limit of 10,000 nested arrays and objects. It only
// scans, a few instructions a byte where encoding/json's state machine spends tens.
// FuzzValid checks it against encoding/json.
func Valid(b []byte) bool { return valid(b, maxNesting) }

// ValidAnyDepth is Valid without the limit on nesting: for reading the envelope of a message
// nested deeper than encoding/json reads, to answer it under its own id.
func ValidAnyDepth(b []byte) bool { return valid(b, -1) }

// valid is Valid with at most limit nested arrays and objects (no limit when negative).
func valid(b []byte, limit int) bool {
	var small [64]byte
	open := small[:0] // '{' or '[' for each container not yet closed
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(open) == limit {
				return false
			}
			open = append(open, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				if i = memberValue(b, i); i < 0 {
					return false
				}
			}
			continue
		case c == '"':
			if i = stringEnd(b, i); i < 0 {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = numberEnd(b, i); i < 0 {
				return false
			}
		case c == 't':
			i = literalEnd(b, i, "true")
		case c == 'f':
			i = literalEnd(b, i, "false")
		case c == 'n':
			i = literalEnd(b, i, "null")
		default:
			return false
		}
		if i < 0 {
			return false
		}
		// After a value: a comma and the next, or closers.
		for {
			i = skipSpace(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := open[len(open)-1]
			if b[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = memberValue(b, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

// memberValue scans an object member's name and colon from i and returns where its value starts
// (after white space), or -1.
func memberValue(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringEnd(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// inString marks the bytes that stand for themselves inside a string: all but '"', '\\' and
// control characters.
var inString = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// stringEnd returns the index after the string starting at b[i] == '"', or -1. It skips eight
// bytes at a time while they all stand for themselves (a large tool call's arguments are
// mostly long strings).
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for len(b)-i >= 8 && inString8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && inString[b[i]] {
			i++
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// inString8 reports whether all eight bytes of x are inString: none is a quote, a backslash or
// below 0x20 (bytes of 0x80 and over are). It tests them at once with the word tricks for
// "some byte is zero" ((x-0x01…)&^x&0x80…) and "some byte is below n" ((x-n…)&^x&0x80…, exact
// for n <= 0x80): each term has a byte's high bit set where the byte is (among others, but
// only if some byte is) what it looks for.
func inString8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	control := (x - ones*0x20) &^ x
	quote = (quote - ones) &^ quote
	backslash = (backslash - ones) &^ backslash
	return (control|quote|backslash)&highs == 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberEnd returns the index after the number starting at b[i], or -1.
func numberEnd(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digitsEnd(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		i = digitsEnd(b, i)
	}
	return i
}

// digitsEnd returns the index after the digits from i, or -1 if there is none.
func digitsEnd(b []byte, i int) int {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// literalEnd returns the index after lit at b[i], or -1.
func literalEnd(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
