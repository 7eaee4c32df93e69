// Package httptoken checks HTTP field names: RFC 9110 tokens (section 5.6.2: 1*tchar).
package httptoken

import "strings"

// BadByte is the index of the first byte of s a token may not hold, or -1 when there is none
// (an empty s included: Valid says whether s is a token).
func BadByte(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return i
		}
	}
	return -1
}

// Valid reports whether s is a token.
func Valid(s string) bool { return s != "" && BadByte(s) < 0 }
