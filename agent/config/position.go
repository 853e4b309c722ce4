package config

import (
	"strconv"
	"strings"
)

// BurntSushi/toml keeps each key's position but does not export it, so errors about a key
// ("unknown key", "must be positive") find their line through this index instead: one pass
// over the file that records where each table header and each key is written.
//
// Keys are recorded twice over: "plain" as toml.Key pieces joined by dots (what
// MetaData.Keys returns — arrays of tables carry no index there) and "indexed" with the
// array-of-tables index, "devices[1].baud", which is how validation names keys.

type keyPos struct {
	plain   string
	indexed string
	line    int
}

type lineIndex struct {
	entries []keyPos
	byIndex map[string]int
}

func (ix *lineIndex) add(plain, indexed string, line int) {
	ix.entries = append(ix.entries, keyPos{plain, indexed, line})
	if _, dup := ix.byIndex[indexed]; !dup {
		ix.byIndex[indexed] = line
	}
}

// has reports whether the file writes the indexed key itself.
func (ix *lineIndex) has(indexed string) bool {
	_, ok := ix.byIndex[indexed]
	return ok
}

// line returns the line of the indexed key, or of the nearest enclosing table written in
// the file, or 0.
func (ix *lineIndex) line(indexed string) int {
	for k := indexed; k != ""; k = parentKey(k) {
		if l, ok := ix.byIndex[k]; ok {
			return l
		}
	}
	return 0
}

// nth returns the line of the n-th (0-based) occurrence of a plain key, falling back to
// the enclosing table.
func (ix *lineIndex) nth(plain string, n int) int {
	for k := plain; k != ""; k = parentKey(k) {
		seen := 0
		last := 0
		for _, e := range ix.entries {
			if e.plain == k {
				if seen == n {
					return e.line
				}
				seen++
				last = e.line
			}
		}
		if last != 0 {
			return last
		}
	}
	return 0
}

func parentKey(k string) string {
	i := strings.LastIndexAny(k, ".[")
	if i < 0 {
		return ""
	}
	return k[:i]
}

// indexLines scans TOML source for key positions. It never fails: input the TOML parser
// accepts is indexed exactly; anything else is indexed as far as it makes sense, and the
// parser reports the real error.
func indexLines(src string) *lineIndex {
	ix := &lineIndex{byIndex: map[string]int{}}
	arrays := map[string]int{} // plain array-of-tables path -> elements seen
	var plainPrefix, indexedPrefix string
	lines := strings.Split(src, "\n")
	var sc valueScanner
	for n, raw := range lines {
		lineNo := n + 1
		if sc.open() {
			sc.scan(raw)
			continue
		}
		s := strings.TrimSpace(raw)
		switch {
		case s == "" || s[0] == '#':
		case strings.HasPrefix(s, "[["):
			pieces, _ := parseKey(s[2:])
			plain := strings.Join(pieces, ".")
			i := arrays[plain]
			arrays[plain] = i + 1
			plainPrefix = plain
			indexedPrefix = indexedArrayPath(pieces, arrays, i)
			ix.add(plain, indexedPrefix, lineNo)
		case s[0] == '[':
			pieces, _ := parseKey(s[1:])
			plainPrefix = strings.Join(pieces, ".")
			indexedPrefix = plainPrefix
			ix.add(plainPrefix, indexedPrefix, lineNo)
		default:
			pieces, rest := parseKey(s)
			if len(pieces) == 0 {
				continue
			}
			p, q := plainPrefix, indexedPrefix
			for _, piece := range pieces {
				p, q = join(p, piece), join(q, piece)
				ix.add(p, q, lineNo)
			}
			if eq := strings.IndexByte(rest, '='); eq >= 0 {
				sc.scan(rest[eq+1:])
			}
		}
	}
	return ix
}

// indexedArrayPath names element i of an array of tables; a nested array's parent gets
// the index of its latest element.
func indexedArrayPath(pieces []string, arrays map[string]int, i int) string {
	var out string
	for j, piece := range pieces {
		out = join(out, piece)
		if j == len(pieces)-1 {
			out += "[" + strconv.Itoa(i) + "]"
		} else if c := arrays[strings.Join(pieces[:j+1], ".")]; c > 0 {
			out += "[" + strconv.Itoa(c-1) + "]"
		}
	}
	return out
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// parseKey reads a dotted key (bare, "basic" or 'literal' pieces) from the start of s and
// returns the pieces and what follows.
func parseKey(s string) (pieces []string, rest string) {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return pieces, s
		}
		var piece string
		switch s[0] {
		case '"', '\'':
			end := strings.IndexByte(s[1:], s[0])
			if end < 0 {
				return pieces, ""
			}
			piece = s[1 : 1+end]
			if s[0] == '"' {
				if u, err := strconv.Unquote(s[:end+2]); err == nil {
					piece = u
				}
			}
			s = s[end+2:]
		default:
			end := 0
			for end < len(s) && isBareKeyByte(s[end]) {
				end++
			}
			if end == 0 {
				return pieces, s
			}
			piece, s = s[:end], s[end:]
		}
		pieces = append(pieces, piece)
		s = strings.TrimLeft(s, " \t")
		if s == "" || s[0] != '.' {
			return pieces, s
		}
		s = s[1:]
	}
}

func isBareKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// valueScanner follows a value across lines: multi-line strings and arrays or inline
// tables left open at the end of a line.
type valueScanner struct {
	depth int    // open [ and {
	multi string // `"""` or `'''` while inside a multi-line string
}

func (v *valueScanner) open() bool { return v.depth > 0 || v.multi != "" }

func (v *valueScanner) scan(s string) {
	for i := 0; i < len(s); {
		if v.multi != "" {
			end := strings.Index(s[i:], v.multi)
			if end < 0 {
				return
			}
			i += end + 3
			v.multi = ""
			continue
		}
		switch c := s[i]; c {
		case '#':
			return
		case '[', '{':
			v.depth++
			i++
		case ']', '}':
			if v.depth > 0 {
				v.depth--
			}
			i++
		case '"', '\'':
			if strings.HasPrefix(s[i:], strings.Repeat(string(c), 3)) {
				v.multi = strings.Repeat(string(c), 3)
				i += 3
				continue
			}
			i++
			for i < len(s) && s[i] != c {
				if c == '"' && s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		default:
			i++
		}
	}
}
