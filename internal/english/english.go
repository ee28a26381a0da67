// Package english writes the few words compactd's messages to people need to get right: a count
// and its noun ("1 segment", "3 segments").
package english

import "strconv"

// Count is n followed by noun, in the plural unless n is 1 or -1. noun is the singular; nouns
// whose plural is not noun+"s" pass it as plural.
func Count(n int, noun string, plural ...string) string {
	s := strconv.Itoa(n) + " "
	if n == 1 || n == -1 {
		return s + noun
	}
	if len(plural) > 0 {
		return s + plural[0]
	}
	return s + noun + "s"
}
