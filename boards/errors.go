package boards

import (
	"errors"
	"strconv"
)

// ErrUnknownBoard is returned (wrapped) by Lookup when no embedded profile has the name.
var ErrUnknownBoard = errors.New("unknown board")

// ProfileError is returned by Parse for a profile that does not decode or is not sane.
type ProfileError struct {
	File string // "boards/NAME.toml"
	Line int    // 1-based; 0 when the problem has no single line (a missing key)
	Msg  string
}

func (e *ProfileError) Error() string {
	if e.Line > 0 {
		return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
	}
	return e.File + ": " + e.Msg
}
