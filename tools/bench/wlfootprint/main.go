// Command wlfootprint measures what the desired whitelists (agent/whitelist) cost a
// process that holds them: resident memory and bytes on disk, each phase in a fresh
// process of its own, so that nothing else the measuring process did (test frameworks,
// the garbage of building the lists) is counted.
//
//	wlfootprint -case site                  64 terminals holding the same 10,000 persons
//	wlfootprint -case distinct              64 terminals with 10,000 persons each, no two alike
//	wlfootprint -case site -runs 5 -terminals 64 -persons 10000
//	wlfootprint -phase fill -case site -dir DIR -prefix t   fill DIR only (tools/bench/rss.sh)
//
// Without -phase it runs itself as a child for each phase and prints one line per phase:
//
//	fill   a fresh data directory: the store is opened, every terminal's list is set by
//	       one Replace (as a SetWhitelist would), then Flush, Compact and Close
//	reopen a fresh process opens the directory (replaying the snapshot and the journal),
//	       -runs times
//
// Each phase reads its resident set (VmRSS, and its anonymous and file parts, from
// /proc/self/status) after runtime.GC and debug.FreeOSMemory, before opening the store and
// again with the store open, and reports the difference, the live heap added, and the
// directory's allocated blocks (du, the open segment's reserved blocks included) and file
// bytes. The lists themselves are built before the first reading and dropped before the
// second, so the fill's figure is the store's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
)

// figures is one phase's measurement, printed by the child as one JSON line.
type figures struct {
	Phase      string `json:"phase"`
	RSSBefore  int64  `json:"rssBefore"` // bytes, before opening the store
	RSSAfter   int64  `json:"rssAfter"`  // bytes, the store open
	AnonBefore int64  `json:"anonBefore"`
	AnonAfter  int64  `json:"anonAfter"`
	FileBefore int64  `json:"fileBefore"`
	FileAfter  int64  `json:"fileAfter"`
	HeapBefore uint64 `json:"heapBefore"`
	HeapAfter  uint64 `json:"heapAfter"`
	PeakDisk   int64  `json:"peakDisk"` // fill: the largest du seen between Replaces
	Disk       int64  `json:"disk"`     // du of the directory at the end of the phase
	FileBytes  int64  `json:"fileBytes"`
	Terminals  int    `json:"terminals"`
	Members    int    `json:"members"`
	Records    int    `json:"records"`
	Chunks     int    `json:"chunks"`
}

func main() {
	phase := flag.String("phase", "", "fill or reopen: run that phase in this process (default: run each in a child)")
	kase := flag.String("case", "site", "site: every terminal the same list; distinct: every terminal its own")
	dir := flag.String("dir", "", "the store's directory (default: a new temporary one, removed at the end)")
	terminals := flag.Int("terminals", 64, "terminals")
	persons := flag.Int("persons", 10_000, "persons per terminal")
	prefix := flag.String("prefix", "terminal-", "terminal ids are PREFIX01, PREFIX02, …")
	runs := flag.Int("runs", 3, "reopen phases (each a fresh process)")
	flag.Parse()
	if *kase != "site" && *kase != "distinct" || *terminals <= 0 || *persons <= 0 || *runs <= 0 {
		fmt.Fprintln(os.Stderr, "wlfootprint: bad arguments (see -h)")
		os.Exit(2)
	}
	opt := options(*terminals, *persons)
	var err error
	var f figures
	switch *phase {
	case "fill":
		if f, err = fill(*dir, opt, *kase, *prefix, *terminals, *persons); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(f)
		}
	case "reopen":
		if f, err = reopen(*dir, opt); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(f)
		}
	case "":
		err = drive(*dir, *kase, *prefix, *terminals, *persons, *runs)
	default:
		err = fmt.Errorf("-phase %q: want fill or reopen", *phase)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wlfootprint:", err)
		os.Exit(1)
	}
}

// options are the store's defaults (as the agent opens it, with [journal] sync = "batch"),
// with room for the distinct case's records.
func options(terminals, persons int) whitelist.Options {
	return whitelist.Options{
		Journal:      journal.Options{Sync: journal.SyncBatch},
		MaxTerminals: max(terminals, whitelist.DefaultMaxTerminals),
		MaxPersons:   max(persons, whitelist.DefaultMaxPersons),
		MaxRecords:   max(terminals*persons, whitelist.DefaultMaxRecords),
	}
}

// list is terminal d's list: the site's (variant 0) or its own.
func list(kase string, d, persons int) []whitelist.Record {
	variant := 0
	if kase == "distinct" {
		variant = d
	}
	out := make([]whitelist.Record, persons)
	for i := range out {
		out[i] = whitelist.Record{ID: fmt.Sprintf("%08d", i+variant*persons),
			Name:      fmt.Sprintf("Person %d of site %d", i, variant),
			ValidFrom: "2026-01-01T00:00:00Z", ValidTo: "2027-12-31T23:59:59Z"}
	}
	return out
}

func fill(dir string, opt whitelist.Options, kase, prefix string, terminals, persons int) (figures, error) {
	var f figures
	if dir == "" {
		return f, fmt.Errorf("-phase fill needs -dir")
	}
	f.Phase = "fill"
	before(&f)
	s, err := whitelist.Open(dir, opt)
	if err != nil {
		return f, err
	}
	var site []whitelist.Record
	for d := range terminals {
		l := site
		if l == nil {
			l = list(kase, d, persons)
			if kase == "site" {
				site = l
			}
		}
		if _, err := s.Replace(fmt.Sprintf("%s%02d", prefix, d+1), l); err != nil {
			return f, err
		}
		if err := s.Flush(); err != nil {
			return f, err
		}
		f.PeakDisk = max(f.PeakDisk, diskBytes(dir))
	}
	site = nil
	if err := s.Compact(); err != nil {
		return f, err
	}
	after(&f, s)
	f.Disk, f.FileBytes = diskBytes(dir), s.Stats().FileBytes
	return f, s.Close()
}

func reopen(dir string, opt whitelist.Options) (figures, error) {
	var f figures
	if dir == "" {
		return f, fmt.Errorf("-phase reopen needs -dir")
	}
	f.Phase = "reopen"
	before(&f)
	s, err := whitelist.Open(dir, opt)
	if err != nil {
		return f, err
	}
	after(&f, s)
	f.Disk, f.FileBytes = diskBytes(dir), s.Stats().FileBytes
	return f, s.Close()
}

func before(f *figures) {
	f.HeapBefore = settle()
	f.RSSBefore, f.AnonBefore, f.FileBefore = resident()
}

func after(f *figures, s *whitelist.Store) {
	f.HeapAfter = settle()
	f.RSSAfter, f.AnonAfter, f.FileAfter = resident()
	st := s.Stats()
	f.Terminals, f.Members, f.Records, f.Chunks = st.Terminals, st.Members, st.Records, st.Chunks
}

// settle collects twice, returns free memory to the kernel and returns the live heap.
func settle() uint64 {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// resident reads VmRSS, RssAnon and RssFile (bytes) from /proc/self/status.
func resident() (rss, anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "RssAnon:":
			anon = kb << 10
		case "RssFile:":
			file = kb << 10
		}
	}
	return rss, anon, file
}

// diskBytes is the blocks allocated to the files under dir (du).
func diskBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// drive runs the fill and the reopens, each in a child process, and prints their figures.
func drive(dir, kase, prefix string, terminals, persons, runs int) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "wlfootprint-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "whitelist")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := func(phase string) (figures, error) {
		var f figures
		cmd := exec.Command(self, "-phase", phase, "-dir", dir, "-case", kase, "-prefix", prefix,
			"-terminals", strconv.Itoa(terminals), "-persons", strconv.Itoa(persons))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return f, fmt.Errorf("%s: %w", phase, err)
		}
		return f, json.Unmarshal(out, &f)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.2f", float64(b)/(1<<20)) }
	fmt.Printf("case %s: %d terminals x %d persons\n", kase, terminals, persons)
	fmt.Println("phase   rss+MiB anon+MiB file+MiB heap+MiB  rss-before-MiB  disk-MiB files-MiB peak-disk-MiB records chunks")
	var added []int64
	for i := range runs + 1 {
		phase := "reopen"
		if i == 0 {
			phase = "fill"
		}
		f, err := child(phase)
		if err != nil {
			return err
		}
		if phase == "reopen" {
			added = append(added, f.RSSAfter-f.RSSBefore)
		}
		peak := "-"
		if phase == "fill" {
			peak = mib(f.PeakDisk)
		}
		fmt.Printf("%-7s %7s %8s %8s %8s %15s %9s %9s %13s %7d %6d\n", phase,
			mib(f.RSSAfter-f.RSSBefore), mib(f.AnonAfter-f.AnonBefore), mib(f.FileAfter-f.FileBefore),
			mib(int64(f.HeapAfter)-int64(f.HeapBefore)), mib(f.RSSBefore), mib(f.Disk), mib(f.FileBytes), peak,
			f.Records, f.Chunks)
	}
	slices.Sort(added)
	fmt.Printf("reopen rss added: median %s MiB, range %s-%s MiB over %d fresh processes\n",
		mib(added[len(added)/2]), mib(added[0]), mib(added[len(added)-1]), len(added))
	return nil
}
