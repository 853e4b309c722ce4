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

// walk reads one whole value iteratively: pending[d] is how many whole values the aggregate
// at depth d still expects. No recursion, so no input can exhaust the stack, and each loop
// turn consumes at least three bytes, so it ends.
func walk(b []byte, dst []Value, collect bool) ([]Value, int, error) {
	var pending [MaxDepth + 1]int
	depth := 0
	pending[0] = 1 // the top level expects one value
	i := 0
	for {
		v, next, err := readValueAt(b, i)
		if err != nil {
			return dst, 0, err
		}
		if collect {
			dst = append(dst, v)
		}
		n := 0
		switch v.Kind {
		case Array, Set, Push:
			n = v.Len // -1 for "*-1": no elements
		case Map:
			n = 2 * v.Len
		case Attribute:
			// The pairs are read at a deeper level; the annotated value then takes this
			// slot, so the attribute itself does not count.
			pending[depth]++
			n = 2 * v.Len
		}
		pending[depth]--
		if n > 0 {
			if depth == MaxDepth {
				return dst, 0, errAt(i, ErrTooDeep)
			}
			depth++
			pending[depth] = n
		}
		i = next
		for pending[depth] == 0 {
			if depth == 0 {
				return dst, i, nil
			}
			depth--
		}
	}
}
