package compact

// The estimator approximates o200k_base without running it. BPE first splits text with a regular
// expression into pieces (words with an optional leading space or symbol, CamelCase halves,
// 1-3 digit groups, symbol runs, newline runs, whitespace runs) and then merges each piece into
// one or more vocabulary tokens; common pieces are one token, long or rare ones several. One pass
// over the bytes counts those piece classes, and a linear model fitted by least squares on real
// text (see calibrate_test.go, COMPACT_CALIBRATE=1) turns the counts into tokens. It reads the
// JSON string literals as they are (escapes decoded on the fly), so it does not copy strings.
//
// Measured error against exact o200k_base counts (TestEstimateCalibration: ~160 chunks of 4 KiB
// each, wrapped as function_call_output items; go1.26 GOROOT docs, Go/JS/Python code, JSON):
//
//	class  total error  per-chunk median  p95    max
//	prose  +0.9%        3.9%              19.2%  20.8%
//	code   +1.3%        3.3%              11.7%  15.1%
//	json   -4.2%        8.9%              18.5%  20.8%
//
// So a whole request (hundreds of items whose errors partly cancel) is typically within ±5%, and
// a single small item can be off by a fifth. Request's default margin (15%) is above that
// aggregate error, so near the threshold the decision is made on exact counts. Pathological text
// defeats it (one long word repeated thousands of times is overestimated by half or more); such a
// request is then counted by estimate until the background worker has counted it exactly. The weights
// are a non-negative least-squares fit: they are not individually token costs (the fit folds the
// newline pieces into the others), so refit rather than hand-tune them.

// feature indexes
const (
	fWords      = iota // letter runs (including CamelCase splits)
	fLongLetter        // letters beyond the 6th in a letter run
	fDigitGroup        // 1-3 digit groups
	fPunctRun          // runs of ASCII symbols not absorbed as a word prefix
	fPunctChar         // symbol characters beyond the first in a run
	fNewline           // runs of line breaks (with surrounding blanks)
	fBlankRun          // runs of two or more spaces (indentation)
	fTabRun            // runs of blanks holding a tab (Go indentation: the tab rarely merges)
	fHigh              // non-ASCII bytes
	numFeatures
)

// estimateWeights are the fitted token costs of each feature (o200k_base, calibrated with
// COMPACT_CALIBRATE=1 go test -run TestEstimateCalibration on prose, Go code and JSON).
var estimateWeights = [numFeatures]float64{
	fWords:      0.8678,
	fLongLetter: 0.2767,
	fDigitGroup: 1.3369,
	fPunctRun:   1.2875,
	fPunctChar:  0.3144,
	fNewline:    0.0,
	fBlankRun:   1.5910,
	fTabRun:     1.0841,
	fHigh:       0.3493,
}

type features [numFeatures]int

func (f *features) tokens() float64 {
	var t float64
	for i, n := range f {
		t += float64(n) * estimateWeights[i]
	}
	return t
}

// char classes
const (
	cNone  = iota
	cLower // a-z
	cUpper // A-Z
	cDigit // 0-9
	cSpace // ' ', '\f', '\v'
	cTab   // '\t'
	cBreak // '\n', '\r'
	cPunct // other ASCII
	cHigh  // byte >= 0x80
)

var asciiClass = func() (t [128]uint8) {
	for i := range t {
		switch {
		case i >= 'a' && i <= 'z':
			t[i] = cLower
		case i >= 'A' && i <= 'Z':
			t[i] = cUpper
		case i >= '0' && i <= '9':
			t[i] = cDigit
		case i == ' ' || i == '\f' || i == '\v':
			t[i] = cSpace
		case i == '\t':
			t[i] = cTab
		case i == '\n' || i == '\r':
			t[i] = cBreak
		default:
			t[i] = cPunct
		}
	}
	return
}()

// scanner accumulates features over a stream of characters fed one class at a time, so that
// escaped JSON literals and plain strings share one state machine.
type scanner struct {
	f        features
	prev     uint8 // class of the previous character
	wordLen  int
	digitRun int
	punctRun int
	// whitespace run state: whether it holds a line break, and blanks since the last break
	inSpace  bool
	hasBreak bool
	hasTab   bool
	blankRun int
	// absorbing is set while line breaks follow a symbol run and belong to it
	absorbing bool
}

func (s *scanner) flushPunct(absorbed bool) {
	if s.punctRun > 0 {
		n := s.punctRun
		if absorbed {
			n-- // the last symbol is the word's prefix, as in `[^\r\n\p{L}\p{N}]?\p{L}+`
		}
		if n > 0 {
			s.f[fPunctRun]++
			s.f[fPunctChar] += n - 1
		}
		s.punctRun = 0
	}
}

func (s *scanner) endWord() {
	if s.wordLen > 6 {
		s.f[fLongLetter] += s.wordLen - 6
	}
	s.wordLen = 0
}

func (s *scanner) endDigits() {
	if s.digitRun > 0 {
		s.f[fDigitGroup] += (s.digitRun + 2) / 3
		s.digitRun = 0
	}
}

// endSpace closes a whitespace run: any run holding a line break is one piece (`\s*[\r\n]+`),
// and two or more blanks after it (indentation) are another.
func (s *scanner) endSpace() {
	if !s.inSpace {
		return
	}
	if s.hasBreak {
		s.f[fNewline]++
	}
	switch {
	case s.hasTab:
		s.f[fTabRun]++
	case s.blankRun >= 2:
		s.f[fBlankRun]++
	}
	s.inSpace, s.hasBreak, s.hasTab, s.blankRun = false, false, false, 0
}

func (s *scanner) add(c uint8) {
	p := s.prev
	s.prev = c
	if c != cBreak {
		s.absorbing = false
	}
	switch c {
	case cLower, cUpper, cHigh:
		s.endDigits()
		s.endSpace()
		if c == cHigh {
			s.f[fHigh]++
		}
		if s.wordLen == 0 || (c == cUpper && p == cLower) {
			s.endWord()
			s.flushPunct(true)
			s.f[fWords]++
		}
		s.wordLen++
		return
	}
	s.endWord()
	switch c {
	case cDigit:
		if s.inSpace && !s.hasBreak && s.blankRun > 0 {
			s.f[fBlankRun]++ // digits take no leading space: the blank before them is a piece of its own
		}
		s.endSpace()
		s.flushPunct(false)
		s.digitRun++
	case cSpace, cTab:
		s.endDigits()
		s.flushPunct(false)
		s.inSpace = true
		s.hasTab = s.hasTab || c == cTab
		s.blankRun++
	case cBreak:
		s.endDigits()
		if s.punctRun > 0 || (s.absorbing && p == cBreak) {
			// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`: a symbol run swallows the line breaks after it
			s.flushPunct(false)
			s.absorbing = true
			s.inSpace, s.blankRun = true, 0
			return
		}
		s.inSpace, s.hasBreak, s.hasTab, s.blankRun = true, true, false, 0
	case cPunct:
		s.endDigits()
		s.endSpace()
		s.punctRun++
	}
}

func (s *scanner) finish() {
	s.endWord()
	s.endDigits()
	s.endSpace()
	s.flushPunct(false)
	s.prev = cNone
}

// scanPlain feeds a plain (unescaped) string.
func (s *scanner) scanPlain(str string) {
	for i := 0; i < len(str); i++ {
		b := str[i]
		if b >= 0x80 {
			s.add(cHigh)
		} else {
			s.add(asciiClass[b])
		}
	}
	s.finish()
}

// scanLiteral feeds a raw JSON string literal (with its quotes), decoding escapes on the fly.
func (s *scanner) scanLiteral(raw string) {
	if len(raw) >= 2 && raw[0] == '"' {
		raw = raw[1 : len(raw)-1]
	}
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		if b >= 'a' && b <= 'z' && s.wordLen > 0 && (s.prev == cLower || s.prev == cUpper) {
			// fast path: lower-case letters continuing a word only lengthen it
			j := i + 1
			for j < len(raw) && raw[j] >= 'a' && raw[j] <= 'z' {
				j++
			}
			s.wordLen += j - i
			s.prev = cLower
			i = j - 1
			continue
		}
		switch {
		case b == '\\' && i+1 < len(raw):
			i++
			switch raw[i] {
			case 'n', 'r':
				s.add(cBreak)
			case 't':
				s.add(cTab)
			case 'u':
				i += 4
				s.add(cHigh)
				s.add(cHigh)
			default:
				s.add(cPunct)
			}
		case b >= 0x80:
			s.add(cHigh)
		default:
			s.add(asciiClass[b])
		}
	}
	s.finish()
}
