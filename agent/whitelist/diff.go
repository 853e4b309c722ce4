package whitelist

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Entry is one person of a list as a reconciliation compares it: its id and rev.
type Entry struct {
	ID  string
	Rev face.Rev
}

// ChangeKind is how a terminal's list differs from the desired one at one person.
type ChangeKind int

const (
	Missing ChangeKind = iota // desired, not on the terminal
	Extra                     // on the terminal, not desired
	Changed                   // on both, with another rev
)

func (k ChangeKind) String() string {
	switch k {
	case Missing:
		return "missing"
	case Extra:
		return "extra"
	case Changed:
		return "changed"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one difference a Diff found. Rev is the desired rev (Missing, Changed) or the
// terminal's (Extra).
type Change struct {
	Kind ChangeKind
	ID   string
	Rev  face.Rev
}

// diffPage is how many desired entries a Diff reads at a time.
const diffPage = 256

// Diff compares a terminal's list, read page by page (ListPersons), with its desired list,
// read page by page beside it: neither list is held whole. The desired list is read as it
// is when each page is compared; an update during a diff shows in the pages after it
// (the digest check after the repair catches what moved meanwhile).
type Diff struct {
	s       *Store
	dev     string
	after   string // ids up to here (bytewise) are compared
	started bool
	done    bool
	buf     []Entry // desired entries read ahead
	pos     int
	cursor  string // the last desired id read
	end     bool   // no desired entry after buf
	// Counts of the changes found so far.
	Missing, Extra, Changed int
}

// Diff starts a comparison of dev's desired list with the terminal's.
func (s *Store) Diff(dev string) *Diff { return &Diff{s: s, dev: dev} }

// ErrBadPage is wrapped by Page's errors for a page that breaks ListPersons' order.
var ErrBadPage = errors.New("whitelist: the terminal's page is out of order")

// Page compares one ListPersons page: held (ids increasing, each greater than the previous
// page's next) and next, the page's last id while more may follow or "" at the end of the
// list. It calls fn for each difference among the ids the page covers, in id order. After
// the page with next "" the comparison is complete.
func (d *Diff) Page(held []Entry, next string, fn func(Change)) error {
	if d.done {
		return errors.New("whitelist: the diff is complete")
	}
	for i, e := range held {
		if d.started && e.ID <= d.after || i > 0 && e.ID <= held[i-1].ID || next != "" && e.ID > next || e.ID == "" {
			return fmt.Errorf("%w: %q", ErrBadPage, e.ID)
		}
	}
	if next != "" && d.started && next <= d.after {
		return fmt.Errorf("%w: next %q", ErrBadPage, next)
	}
	h := 0
	for {
		de, dok := d.peek(next)
		switch {
		case h < len(held) && (!dok || held[h].ID < de.ID):
			d.Extra++
			fn(Change{Extra, held[h].ID, held[h].Rev})
			h++
		case h < len(held) && held[h].ID == de.ID:
			if held[h].Rev != de.Rev {
				d.Changed++
				fn(Change{Changed, de.ID, de.Rev})
			}
			h++
			d.pos++
		case dok:
			d.Missing++
			fn(Change{Missing, de.ID, de.Rev})
			d.pos++
		default:
			d.started, d.after = true, next
			d.done = next == ""
			return nil
		}
	}
}

// peek returns the next desired entry not yet compared, if its id is at most upTo ("":
// no bound).
func (d *Diff) peek(upTo string) (Entry, bool) {
	if d.pos == len(d.buf) && !d.end {
		d.buf, d.pos = d.s.Page(d.dev, d.cursor, diffPage, d.buf[:0]), 0
		if len(d.buf) < diffPage {
			d.end = true
		}
		if len(d.buf) > 0 {
			d.cursor = d.buf[len(d.buf)-1].ID
		}
	}
	if d.pos == len(d.buf) {
		return Entry{}, false
	}
	e := d.buf[d.pos]
	if upTo != "" && e.ID > upTo {
		return Entry{}, false
	}
	return e, true
}
