package resp3

// A whole value is one token plus, for an aggregate, all its elements, each itself a whole
// value. An Attribute is not a value of its own (RESP3: "the client should not consider such a
// dictionary part of the reply"): its pairs and the value it annotates form one whole value,
// and inside an aggregate it does not count as an element.

// Skip reads one whole value from the start of b, validating every token of it, and returns
// the bytes after it. Nesting deeper than MaxDepth is ErrTooDeep. It does not allocate on
// success. On error rest is b.
func Skip(b []byte) (rest []byte, err error) {
	_, next, err := walk(b, nil, false)
	if err != nil {
		return b, err
	}
	return b[next:], nil
}

// ReadTree reads one whole value from the start of b and appends its tokens to dst in
// pre-order: an aggregate's header, then its elements (each followed by its own elements).
// Appending them with AppendValue in order rebuilds the input. It does not allocate when dst
// has room for every token. On error it returns dst unchanged and rest is b.
//
// Str fields are views into b, valid while b lives and is not modified.
func ReadTree(b []byte, dst []Value) (tree []Value, rest []byte, err error) {
	tree, next, err := walk(b, dst, true)
	if err != nil {
		return dst, b, err
	}
	return tree, b[next:], nil
}

// ParseTree is ReadTree for input that must hold exactly one whole value: bytes after it are
// ErrTrailingBytes.
func ParseTree(b []byte, dst []Value) ([]Value, error) {
	tree, next, err := walk(b, dst, true)
	if err != nil {
		return dst, err
	}
	if next != len(b) {
		return dst, errAt(next, ErrTrailingBytes)
	}
	return tree, nil
}

// walk reads one whole value starting at b[0].
func walk(b []byte, dst []Value, collect bool) ([]Value, int, error) {
	return walkAt(b, 0, dst, collect, 0)
}

// walkAt reads the whole value at b[i]. It recurses once per nesting level, and depth is
// bounded by MaxDepth, so no input can exhaust the stack; every token consumes at least three
// bytes, so it ends. Tokens are read straight into their slot in dst (see readValueAt).
func walkAt(b []byte, i int, dst []Value, collect bool, depth int) ([]Value, int, error) {
	var scratch Value
	for {
		v := &scratch
		if collect {
			dst = grow(dst)
			v = &dst[len(dst)-1]
		}
		next, err := readValueAt(b, i, v)
		if err != nil {
			return dst, 0, err
		}
		n := v.Len // Array, Set, Push; -1 for "*-1" means no elements
		kind := v.Kind
		switch kind {
		case Array, Set, Push:
		case Map, Attribute:
			n = 2 * v.Len
		default:
			return dst, next, nil
		}
		if n > 0 && depth == MaxDepth {
			return dst, 0, errAt(i, ErrTooDeep)
		}
		for ; n > 0; n-- {
			if next < len(b) && !aggregateByte[b[next]] {
				// A scalar element: read it here rather than one call deeper.
				e := &scratch
				if collect {
					dst = grow(dst)
					e = &dst[len(dst)-1]
				}
				next, err = readValueAt(b, next, e)
				if err != nil {
					return dst, 0, err
				}
				continue
			}
			dst, next, err = walkAt(b, next, dst, collect, depth+1)
			if err != nil {
				return dst, 0, err
			}
		}
		if kind != Attribute {
			return dst, next, nil
		}
		// An attribute annotates the value after it, which is read as part of this one.
		i = next
	}
}

// grow extends dst by one element (amortised, like append) and returns it.
func grow(dst []Value) []Value {
	if len(dst) < cap(dst) {
		return dst[:len(dst)+1]
	}
	return append(dst, Value{})
}

var aggregateByte = [256]bool{'*': true, '%': true, '~': true, '|': true, '>': true}
