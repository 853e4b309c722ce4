package agent

import (
	"errors"
	"fmt"
)

// msgpSplit splits the first msgp object of b into what the encoding adds (map and array
// headers, every byte of a map key, the type and length prefix of each value) and the
// values' own bytes (a string's or bin's bytes, an integer's payload, a fixint's one byte),
// and returns the bytes after it. Framing and encoding overhead is the first; the second
// is what the protocol says.
func msgpSplit(b []byte, key bool) (enc, val int, rest []byte, err error) {
	if len(b) == 0 {
		return 0, 0, nil, errors.New("msgp: truncated")
	}
	be := func(k int) int {
		n := 0
		for i := 1; i <= k && i < len(b); i++ {
			n = n<<8 | int(b[i])
		}
		return n
	}
	scalar := func(prefix, n int) (int, int, []byte, error) {
		if prefix+n > len(b) {
			return 0, 0, nil, errors.New("msgp: truncated")
		}
		if key { // a key is the encoding's, whatever its type
			return prefix + n, 0, b[prefix+n:], nil
		}
		return prefix, n, b[prefix+n:], nil
	}
	switch c := b[0]; {
	case c <= 0x7f || c >= 0xe0: // fixint
		return scalar(0, 1)
	case c <= 0x8f:
		return msgpSplitN(b[1:], 1, int(c&0x0f), true)
	case c <= 0x9f:
		return msgpSplitN(b[1:], 1, int(c&0x0f), false)
	case c <= 0xbf: // fixstr
		return scalar(1, int(c&0x1f))
	case c == 0xc0:
		return scalar(1, 0)
	case c == 0xc2 || c == 0xc3:
		return scalar(0, 1)
	case c == 0xc4 || c == 0xd9: // bin8, str8
		return scalar(2, be(1))
	case c == 0xc5 || c == 0xda: // bin16, str16
		return scalar(3, be(2))
	case c == 0xc6 || c == 0xdb: // bin32, str32
		return scalar(5, be(4))
	case c == 0xcc || c == 0xd0:
		return scalar(1, 1)
	case c == 0xcd || c == 0xd1:
		return scalar(1, 2)
	case c == 0xce || c == 0xd2:
		return scalar(1, 4)
	case c == 0xcf || c == 0xd3:
		return scalar(1, 8)
	case c == 0xdc:
		return msgpSplitN(b[min(3, len(b)):], 3, be(2), false)
	case c == 0xde:
		return msgpSplitN(b[min(3, len(b)):], 3, be(2), true)
	}
	return 0, 0, nil, fmt.Errorf("msgp: type %#x not used by the protocol", b[0])
}

// msgpSplitN splits n array elements (or n map entries) that follow a header of h bytes.
func msgpSplitN(b []byte, h, n int, isMap bool) (enc, val int, rest []byte, err error) {
	enc = h
	for range n {
		if isMap {
			e, v, r, err := msgpSplit(b, true)
			if err != nil {
				return 0, 0, nil, err
			}
			enc, val, b = enc+e, val+v, r
		}
		e, v, r, err := msgpSplit(b, false)
		if err != nil {
			return 0, 0, nil, err
		}
		enc, val, b = enc+e, val+v, r
	}
	return enc, val, b, nil
}
