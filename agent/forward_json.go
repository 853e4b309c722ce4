package agent

import (
	"strconv"
	"unicode/utf8"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// appendAckJSON appends a as face.Ack's JSON ({"messageId":…,"code":…,"message":…}),
// byte for byte what encoding/json writes (FuzzAckJSON checks), without its reflection
// and allocations: forwarding an ack is on the device event path.
func appendAckJSON(dst []byte, a *face.Ack) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return dst, err
	}
	dst = append(dst, `{"messageId":`...)
	dst = appendJSONString(dst, a.MessageID)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(a.Code), 10)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, a.Message)
	return append(dst, '}'), nil
}

// appendJSONString quotes s as encoding/json does with its default HTML escaping: <, >
// and & as \u003c…, control characters as \n, \t, … or \u00XX, invalid UTF-8 as
// \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
