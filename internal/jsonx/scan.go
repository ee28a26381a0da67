package jsonx

// Scanner primitives for the iterative walks over JSON text (compact's token walk, the
// archive's text index): they skip a string, a scalar or a whole value by counting brackets,
// never recursing, so a walk built on them is linear at any depth. They take a string or a
// []byte, because the walks view bodies as strings without copying.

// Text is what the scanner primitives read: JSON as a string or as bytes.
type Text interface{ ~string | ~[]byte }

// StringEnd returns the offset just past the string literal whose opening quote is at js[i], and
// false when the string is not terminated (the offset is then len(js)).
func StringEnd[T Text](js T, i int) (int, bool) {
	for j := i + 1; j < len(js); j++ {
		switch js[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return len(js), false
}

// ScalarEnd returns the offset just past the number or literal (true, false, null) that starts
// at js[i]: like gjson, it ends at whitespace, a comma or a closing bracket.
func ScalarEnd[T Text](js T, i int) int {
	j := i + 1
	for j < len(js) {
		switch js[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// SkipMember skips the ':' and the value that follow an object key ending at js[i], and returns
// the offset past the value; false when the value is missing or truncated.
func SkipMember[T Text](js T, i int) (int, bool) {
	for i < len(js) && (js[i] == ' ' || js[i] == '\t' || js[i] == '\n' || js[i] == '\r' || js[i] == ':') {
		i++
	}
	if i >= len(js) {
		return i, false
	}
	switch js[i] {
	case '"':
		return StringEnd(js, i)
	case '{', '[':
		depth := 0
		for i < len(js) {
			switch js[i] {
			case '"':
				end, ok := StringEnd(js, i)
				if !ok {
					return end, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	case '}', ']', ',':
		return i, false
	default:
		return ScalarEnd(js, i), true
	}
}
