package resp3

// ParseCommand parses b, which must be exactly one command — a non-empty array of non-null
// blob strings, as the state store's requests are — into args[:0] and returns the arguments.
// Each argument is a view into b (capacity-limited, so appending to one cannot overwrite its
// neighbour), valid while b lives and is not modified.
//
// More arguments than cap(args) is ErrTooManyElements; bytes after the array are
// ErrTrailingBytes; a proper prefix of a command is ErrIncomplete. ParseCommand never
// allocates on success.
func ParseCommand(b []byte, args [][]byte) ([][]byte, error) {
	args, next, err := readCommandAt(b, args)
	if err != nil {
		return args, err
	}
	if next != len(b) {
		return args[:0], errAt(next, ErrTrailingBytes)
	}
	return args, nil
}

// ReadCommand is ParseCommand for a stream or a pipeline: it reads one command from the start
// of b and returns the bytes after it. On error rest is b.
func ReadCommand(b []byte, args [][]byte) (cmd [][]byte, rest []byte, err error) {
	args, next, err := readCommandAt(b, args)
	if err != nil {
		return args, b, err
	}
	return args, b[next:], nil
}

// readCommandAt is the command fast path: lengths are parsed in place; anything odd goes
// through readLength, which also produces the precise error.
func readCommandAt(b []byte, args [][]byte) ([][]byte, int, error) {
	args = args[:0]
	if len(b) == 0 {
		return args, 0, ErrIncomplete
	}
	if b[0] != byte(Array) {
		if _, err := readValueAt(b, 0, new(Value)); IsMalformed(err) {
			return args, 0, err // unknown type byte, or otherwise broken
		}
		return args, 0, errAt(0, ErrNotCommand)
	}
	var n, i int
	if len(b) >= 4 && b[1]-'1' < 9 && b[2] == '\r' && b[3] == '\n' {
		n, i = int(b[1]-'0'), 4 // "*1".."*9"
	} else {
		var err error
		n, i, err = readLength(b, 1)
		if err != nil {
			return args, 0, err
		}
		if n <= 0 {
			return args, 0, errAt(0, ErrNotCommand) // "*-1" or "*0": no command name
		}
		if n > MaxElements {
			return args, 0, errAt(1, ErrTooManyElements)
		}
	}
	if n > cap(args) {
		return args, 0, errAt(1, ErrTooManyElements)
	}
	args = args[:n]
	for k := range args {
		if i >= len(b) {
			return args[:0], 0, ErrIncomplete
		}
		if b[i] != byte(BlobString) {
			if _, err := readValueAt(b, i, new(Value)); IsMalformed(err) {
				return args[:0], 0, err
			}
			return args[:0], 0, errAt(i, ErrNotCommand)
		}
		// Fast paths: "$d\r\n" and "$dd\r\n" (keys, names, small values) by pattern, then any
		// canonical length below 1<<26 in a loop. Anything else (sign, leading zero, huge,
		// missing CRLF, end of input) is re-read by readLength for the precise error.
		var l, j int
		if i+4 < len(b) && b[i+1]-'0' < 10 && b[i+2] == '\r' && b[i+3] == '\n' {
			l, j = int(b[i+1]-'0'), i+4
		} else if i+5 < len(b) && b[i+1]-'1' < 9 && b[i+2]-'0' < 10 && b[i+3] == '\r' && b[i+4] == '\n' {
			l, j = int(b[i+1]-'0')*10+int(b[i+2]-'0'), i+5
		} else {
			for j = i + 1; j < len(b) && l < 1<<26; j++ { // l < 1<<26: l*10+9 fits in 32 bits
				d := b[j] - '0'
				if d > 9 {
					break
				}
				l = l*10 + int(d)
			}
			if j+1 < len(b) && b[j] == '\r' && b[j+1] == '\n' && j > i+1 && b[i+1] != '0' {
				j += 2
			} else {
				var err error
				l, j, err = readLength(b, i+1)
				if err != nil {
					return args[:0], 0, err
				}
				if l < 0 {
					return args[:0], 0, errAt(i, ErrNotCommand) // "$-1": a null argument
				}
				if l > MaxBlobLen {
					return args[:0], 0, errAt(i+1, ErrTooLarge)
				}
			}
		}
		if l > len(b)-j-2 { // written this way round so that j+l cannot overflow
			if l < len(b)-j && b[j+l] != '\r' {
				return args[:0], 0, errAt(j+l, ErrMissingCRLF)
			}
			return args[:0], 0, ErrLengthPastBuffer
		}
		end := j + l
		if b[end] != '\r' || b[end+1] != '\n' {
			return args[:0], 0, errAt(end, ErrMissingCRLF)
		}
		args[k] = b[j:end:end]
		i = end + 2
	}
	return args, i, nil
}
