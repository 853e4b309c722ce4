package main

import (
	"path/filepath"
	"testing"
)

// TestFillAndReopen: the fill builds the lists asked for, and a reopen replays the same.
func TestFillAndReopen(t *testing.T) {
	for _, c := range []struct {
		kase    string
		records int
	}{{"site", 100}, {"distinct", 300}} {
		dir := filepath.Join(t.TempDir(), "whitelist")
		opt := options(3, 100)
		f, err := fill(dir, opt, c.kase, "t", 3, 100)
		if err != nil {
			t.Fatal(err)
		}
		if f.Terminals != 3 || f.Members != 300 || f.Records != c.records || f.Disk == 0 || f.FileBytes == 0 {
			t.Fatalf("%s: fill %+v", c.kase, f)
		}
		g, err := reopen(dir, opt)
		if err != nil {
			t.Fatal(err)
		}
		if g.Terminals != 3 || g.Members != 300 || g.Records != c.records || g.Disk != f.Disk {
			t.Fatalf("%s: reopen %+v after fill %+v", c.kase, g, f)
		}
		if g.RSSBefore == 0 || g.RSSAfter == 0 {
			t.Fatalf("%s: no resident set read: %+v", c.kase, g)
		}
	}
}
