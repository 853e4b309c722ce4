package memtrim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadOnlySegments(t *testing.T) {
	smaps := `00400000-0089f000 r-xp 00000000 fe:00 10149964                           /opt/fa gent
Size:               4732 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
0089f000-00d6e000 r--p 0049f000 fe:00 10149964                           /opt/fa gent
Anonymous:             0 kB
00d6e000-00d70000 r--p 0096e000 fe:00 10149964                           /opt/fa gent
Size:                  8 kB
Anonymous:             8 kB
00d70000-00dd0000 rw-p 00970000 fe:00 10149964                           /opt/fa gent
Anonymous:             0 kB
00e00000-00e10000 r--s 00000000 fe:00 10149964                           /opt/fa gent
Anonymous:             0 kB
00f00000-00f10000 r--p 00000000 fe:00 10149964                           /opt/fa gent
Size:                 64 kB
7f0000000000-7f0000001000 r--p 00000000 fe:00 1                          /usr/lib/other.so
Anonymous:             0 kB
7ffd000-7ffe000 rw-p 00000000 00:00 0                                    [stack]
Anonymous:             4 kB
`
	got, err := readOnlySegments(strings.NewReader(smaps), "/opt/fa gent")
	if err != nil {
		t.Fatal(err)
	}
	want := []segment{{0x400000, 0x89f000}, {0x89f000, 0xd6e000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("segments = %x, want %x (relocated, writable, shared, unknown and other files left out)", got, want)
	}
	if _, err := readOnlySegments(strings.NewReader("zz-yy r-xp 0 0:0 1 /x\n"), "/x"); err == nil {
		t.Fatal("a bad range was accepted")
	}
}

// TestReleaseImagePIE runs TestReleaseImage in a position-independent build of this test
// binary: its RELRO pages are relocated at start-up, so dropping them would crash it.
func TestReleaseImagePIE(t *testing.T) {
	if runtime.GOOS != "linux" || testing.Short() {
		t.Skip("Linux only; builds a binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	bin := filepath.Join(t.TempDir(), "memtrim-pie.test")
	if out, err := exec.Command(gobin, "test", "-c", "-buildmode=pie", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Skipf("no PIE build here: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-test.run=^TestReleaseImage$", "-test.count=1").CombinedOutput()
	if err != nil {
		t.Fatalf("TestReleaseImage in a PIE build: %v\n%.2000s", err, out)
	}
}

func FuzzReadOnlySegments(f *testing.F) {
	f.Add("00400000-0089f000 r-xp 00000000 fe:00 1 /x\nAnonymous: 0 kB\n")
	f.Add("1-0 r--p 0 0:0 1 /x\n")
	f.Fuzz(func(t *testing.T, smaps string) {
		segs, err := readOnlySegments(strings.NewReader(smaps), "/x")
		if err != nil {
			return
		}
		for _, s := range segs {
			if s.end <= s.start {
				t.Fatalf("empty or reversed segment %x", s)
			}
		}
	})
}

// rssFile reads RssFile from /proc/self/status, in kB.
func rssFile(t *testing.T) int {
	t.Helper()
	kb, err := readRSSFile()
	if err != nil {
		t.Skip(err)
	}
	return kb
}

// readRSSFile is rssFile for any goroutine: it reports what is missing as an error.
func readRSSFile() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "RssFile:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, errors.New("no RssFile in /proc/self/status")
}

func TestReleaseImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		n, err := ReleaseImage()
		if n != 0 || err != nil {
			t.Fatalf("ReleaseImage outside Linux = %d, %v; want 0, nil", n, err)
		}
		return
	}
	before := rssFile(t)
	n, err := ReleaseImage()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no read-only segment of the test binary was found")
	}
	after := rssFile(t)
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after releasing %d bytes: nothing was unmapped", before, after, n)
	}
	// The process goes on working: code and read-only data fault back in.
	var sb strings.Builder
	for i := range 1000 {
		sb.WriteString(time.Duration(i).String())
	}
	if sb.Len() == 0 {
		t.Fatal("unreachable")
	}
	t.Logf("RssFile %d kB -> %d kB", before, after)
}

var sink [][]byte

func TestQuietReleaseReturnsFreeHeap(t *testing.T) {
	released := make(chan Release, 4)
	q := StartQuietRelease(50*time.Millisecond, func(r Release) { released <- r })
	defer q.Stop()

	// A burst: 16 MiB live, then dropped. The collections it causes arm the release.
	for range 4096 {
		sink = append(sink, make([]byte, 4096))
	}
	sink = nil
	runtime.GC()
	select {
	case r := <-released:
		if r.Free < minFree {
			t.Fatalf("released with only %d bytes free", r.Free)
		}
		if r.Released == 0 {
			t.Fatalf("release of %d free bytes returned nothing to the kernel", r.Free)
		}
		s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(s)
		if free := s[0].Value.Uint64(); free >= r.Free {
			t.Fatalf("free resident heap %d after the release, %d before", free, r.Free)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10 s after a 16 MiB burst went quiet")
	}
}

// TestQuietReleaseReleasesImage: the release after a burst also drops the binary's
// read-only pages the burst faulted in, as ReleaseImage does after start-up.
func TestQuietReleaseReleasesImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ReleaseImage is Linux-only")
	}
	before := rssFile(t) // skips the test where there is no RssFile
	type seen struct {
		r       Release
		rssFile int // kB, read at once after the release
		err     error
	}
	released := make(chan seen, 4)
	q := StartQuietRelease(50*time.Millisecond, func(r Release) {
		kb, err := readRSSFile()
		released <- seen{r, kb, err}
	})
	defer q.Stop()
	// The burst runs code (fmt, strconv) and allocates 16 MiB that it then drops.
	var sb strings.Builder
	for i := range 4096 {
		sink = append(sink, make([]byte, 4096))
		fmt.Fprintf(&sb, "%d %v %q\n", i, time.Duration(i), "x")
	}
	sink = nil
	before = max(before, rssFile(t))
	runtime.GC()
	select {
	case s := <-released:
		if s.err != nil {
			t.Fatal(s.err)
		}
		if s.r.ImageErr != nil {
			t.Fatal(s.r.ImageErr)
		}
		if s.r.Image == 0 {
			t.Fatal("the release after a burst left the binary's pages mapped")
		}
		if s.rssFile >= before {
			t.Fatalf("RssFile %d kB after the burst, %d kB after the release", before, s.rssFile)
		}
		t.Logf("RssFile %d kB -> %d kB", before, s.rssFile)
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10 s after a 16 MiB burst went quiet")
	}
}

func TestQuietReleaseStop(t *testing.T) {
	released := make(chan Release, 4)
	q := StartQuietRelease(20*time.Millisecond, func(r Release) { released <- r })
	q.Stop()
	for range 1024 {
		sink = append(sink, make([]byte, 4096))
	}
	sink = nil
	runtime.GC()
	runtime.GC()
	// After Stop no timer may be armed: wait well past the quiet time, bounded.
	select {
	case r := <-released:
		t.Fatalf("released after Stop: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
}

// growStack recurses through depth frames of about 1 KiB each, so the goroutine's stack
// grows to fit them; the stack keeps that size after the calls return, until a collection
// shrinks it.
//
//go:noinline
func growStack(depth int) byte {
	var pad [1000]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		return pad[0]
	}
	return growStack(depth-1) + pad[(depth*7)%len(pad)]
}

// TestQuietReleaseShrinksStacks: stacks grown while the process was busy are brought back
// to what their parked goroutines use, not only halved once as a single collection would.
func TestQuietReleaseShrinksStacks(t *testing.T) {
	released := make(chan Release, 4)
	// A second of quiet: the goroutines below must have grown their stacks before the
	// release runs, even on a loaded machine.
	q := StartQuietRelease(time.Second, func(r Release) { released <- r })
	defer q.Stop()
	// A burst leaves free heap to release; its collections arm the release.
	for range 1024 {
		sink = append(sink, make([]byte, 4096))
	}
	sink = nil
	runtime.GC()

	// Then, without allocating enough to start another collection, 64 goroutines grow
	// their stacks to 64 KiB and park: only the release's collections can shrink them.
	const goroutines = 64
	park := make(chan struct{})
	var grown, done sync.WaitGroup
	grown.Add(goroutines)
	done.Add(goroutines)
	for range goroutines {
		go func() {
			defer done.Done()
			growStack(56)
			grown.Done()
			<-park
		}()
	}
	defer func() {
		close(park)
		done.Wait()
	}()
	grown.Wait()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	grownInuse := m.StackInuse

	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10 s after a 4 MiB burst went quiet")
	}
	runtime.ReadMemStats(&m)
	// One collection halves each stack to 32 KiB (2 MiB in all); the parked goroutines
	// need a few KiB each, 4–8 KiB once the release's collections are done (more under
	// the race detector).
	if limit := uint64(goroutines * 24 << 10); m.StackInuse > limit {
		t.Fatalf("stacks in use: %d KiB grown, %d KiB after the release (want at most %d KiB)",
			grownInuse>>10, m.StackInuse>>10, limit>>10)
	}
	t.Logf("stacks in use: %d KiB grown, %d KiB after the release", grownInuse>>10, m.StackInuse>>10)
}

// TestQuietReleaseCollectsSlowGrowth: after a release, a process that goes on allocating
// a little (not enough to start a collection for a long time) is collected again once its
// heap has grown by minGrowth, so the release can run again; without that its garbage
// would take fresh pages until the heap doubled. Automatic collections are off here, so only
// QuietRelease can collect.
func TestQuietReleaseCollectsSlowGrowth(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	released := make(chan Release, 4)
	q := StartQuietRelease(50*time.Millisecond, func(r Release) { released <- r })
	defer q.Stop()
	for range 1024 {
		sink = append(sink, make([]byte, 4096))
	}
	sink = nil
	runtime.GC()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10 s after a 4 MiB burst went quiet")
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	after := m.NumGC
	// Garbage, 4 KiB every millisecond or so, until QuietRelease collects.
	deadline := time.Now().Add(5 * time.Second)
	allocated := 0
	for {
		runtime.ReadMemStats(&m)
		if m.NumGC > after {
			sink = nil
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no collection within 5 s while the heap grew by %d bytes since the release", allocated)
		}
		sink = append(sink[:0], make([]byte, 4096))
		allocated += 4096
		time.Sleep(time.Millisecond)
	}
}
