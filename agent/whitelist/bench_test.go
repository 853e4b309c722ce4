package whitelist

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// rssBytes is the process's resident set after returning free memory to the OS.
func rssBytes(b *testing.B) int64 {
	debug.FreeOSMemory()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	return 0
}

// benchmarkFootprint fills a store with the desired lists of 64 terminals of 10,000
// persons each, every terminal the same list (a site) or each its own, compacts it, and
// reports what it adds to the live heap and the resident set, and its files on disk (du:
// the open segment's reserved blocks included) right after compaction and at their
// largest while the lists were written.
func benchmarkFootprint(b *testing.B, shared bool) {
	const terminals, persons = 64, 10_000
	for b.Loop() {
		dir := b.TempDir()
		var site []Record
		if shared {
			site = siteList(persons, 0)
		}
		heap0, rss0 := heapAfterGC(), rssBytes(b)
		s, err := Open(dir, Options{MaxRecords: terminals * persons, Journal: journal.Options{Sync: journal.SyncNone}})
		if err != nil {
			b.Fatal(err)
		}
		var peakDisk int64
		for d := range terminals {
			list := site
			if !shared {
				list = siteList(persons, d)
			}
			if _, err := s.Replace(fmt.Sprintf("terminal-%02d", d), list); err != nil {
				b.Fatal(err)
			}
			peakDisk = max(peakDisk, testutil.DirDiskBytes(b, dir))
		}
		if err := s.Compact(); err != nil {
			b.Fatal(err)
		}
		heap1, rss1 := heapAfterGC(), rssBytes(b)
		disk := testutil.DirDiskBytes(b, dir)
		st := s.Stats()
		b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(heap1-heap0)/float64(terminals*persons), "heap-B/member")
		b.ReportMetric(float64(disk)/(1<<20), "disk-MiB")
		b.ReportMetric(float64(peakDisk)/(1<<20), "peak-disk-MiB")
		b.ReportMetric(float64(st.FileBytes)/(1<<20), "file-MiB")
		b.ReportMetric(float64(st.Chunks), "chunks")
		runtime.KeepAlive(site)
		s.Close()
	}
}

// BenchmarkFootprintSite: 64 terminals holding the same 10,000 persons.
func BenchmarkFootprintSite(b *testing.B) { benchmarkFootprint(b, true) }

// BenchmarkFootprintDistinct: 64 terminals with 10,000 persons each, no two alike.
func BenchmarkFootprintDistinct(b *testing.B) { benchmarkFootprint(b, false) }

// BenchmarkReplace10k replaces a terminal's list of 10,000 persons, durably (SyncAlways,
// Flush): by a list whose every record changed, or by the same list.
func BenchmarkReplace10k(b *testing.B) {
	lists := [2][]Record{siteList(10_000, 0), siteList(10_000, 0)}
	for i := range lists[1] {
		lists[1][i].Name += " (changed)"
	}
	for _, changed := range []bool{true, false} {
		b.Run(fmt.Sprintf("changed=%v", changed), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			i := 0
			for b.Loop() {
				if changed {
					i++
				}
				if _, err := s.Replace("d", lists[i%2]); err != nil {
					b.Fatal(err)
				}
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSetIn10k changes one person's record in a list of 10,000, durably.
func BenchmarkSetIn10k(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	list := siteList(10_000, 0)
	s.Replace("d", list)
	i := 0
	for b.Loop() {
		r := list[i*7919%len(list)]
		r.Name = strconv.Itoa(i)
		i++
		if err := s.Set("d", r); err != nil {
			b.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetKnown: the intake's case at a site, a task's AddPerson setting on one
// terminal a record another terminal holds already (no fsync: the intake flushes once per
// message).
func BenchmarkSetKnown(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	list := siteList(10_000, 0)
	if _, err := s.Replace("site", list); err != nil {
		b.Fatal(err)
	}
	devs := make([]string, 64)
	for i := range devs {
		devs[i] = fmt.Sprintf("t%02d", i+1)
	}
	i := 0
	for b.Loop() {
		if err := s.Set(devs[i/len(list)%len(devs)], list[i%len(list)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDiffScan10k compares a terminal's list of 10,000 persons, read in ListPersons
// pages of 100, with the desired list; 1 % of the records differ.
func BenchmarkDiffScan10k(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	list := siteList(10_000, 0)
	s.Replace("d", list)
	held := make([]Entry, len(list))
	for i, r := range list {
		if i%100 == 0 {
			r.Name = "other"
		}
		held[i] = Entry{r.ID, r.Rev()}
	}
	for b.Loop() {
		d := s.Diff("d")
		for i := 0; i < len(held); i += 100 {
			next := held[i+99].ID
			if i+100 == len(held) {
				next = ""
			}
			if err := d.Page(held[i:i+100], next, func(Change) {}); err != nil {
				b.Fatal(err)
			}
		}
		if d.Changed != 100 {
			b.Fatalf("%d changed", d.Changed)
		}
	}
}
