package config

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seed0e69bba5/faceagent/boards"
)

// boardProfile is where `agent.board = "<name>"` finds its defaults: the boards package's
// profile, rendered as TOML in this package's schema. Parse decodes it before the file, so
// every key written in the file wins over the board's. A board sets:
//
//	[agent]   gomemlimit, data_dir
//	[journal] sync, batch_window
//
// An unknown name is an error wrapping boards.ErrUnknownBoard that lists the known ones.
func boardProfile(name string) ([]byte, error) {
	p, err := boards.Lookup(name)
	if err != nil {
		return nil, err
	}
	return profileTOML(p), nil
}

func profileTOML(p boards.Profile) []byte {
	b := fmt.Appendf(nil, "[agent]\ngomemlimit = %d\ndata_dir = %s\n[journal]\nsync = %s\n",
		p.GOMEMLIMIT, strconv.Quote(p.DataDir), strconv.Quote(string(p.JournalSync)))
	if p.JournalBatchWindow > 0 {
		b = fmt.Appendf(b, "batch_window = %s\n", strconv.Quote(time.Duration(p.JournalBatchWindow).String()))
	}
	return b
}
