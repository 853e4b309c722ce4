package faces

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const (
	crashDirEnv  = "FAFACES_CRASH_DIR"
	crashModeEnv = "FAFACES_CRASH_MODE"
	crashIterEnv = "FAFACES_CRASH_ITER"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir, os.Getenv(crashModeEnv)) // never returns
	}
	os.Exit(m.Run())
}

// crashChild runs in a re-executed test binary until the parent SIGKILLs it.
//
//   - "mid": one Put of a 1 MiB face whose reader stops for good after half of it; "ready"
//     is said once that half is in the temporary file.
//   - "loop": Puts faces of 1 B to 200 KiB one after another, saying each one's sum once
//     its Put returned.
func crashChild(dir, mode string) {
	s, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	switch mode {
	case "mid":
		data, sum := face(999, 1<<20)
		r := &stallingReader{data: data, stallAt: len(data) / 2}
		err := s.Put(sum, int64(len(data)), r)
		fmt.Fprintln(os.Stderr, "child: Put returned", err)
		os.Exit(3)
	case "loop":
		iter, _ := strconv.Atoi(os.Getenv(crashIterEnv))
		rng := rand.New(rand.NewPCG(uint64(iter), 7))
		fmt.Println("ready")
		for i := 0; ; i++ {
			data, sum := face(iter*100000+i, 1+rng.IntN(200<<10))
			if err := s.Put(sum, int64(len(data)), bytes.NewReader(data)); err != nil {
				fmt.Fprintln(os.Stderr, "child put:", err)
				os.Exit(3)
			}
			fmt.Println(sum.String())
		}
	}
	os.Exit(4)
}

// stallingReader gives data in 64 KiB pieces up to stallAt, then says "ready" and blocks
// for ever.
type stallingReader struct {
	data    []byte
	off     int
	stallAt int
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.off >= r.stallAt {
		fmt.Println("ready")
		select {}
	}
	n := copy(p[:min(len(p), 64<<10, r.stallAt-r.off)], r.data[r.off:])
	r.off += n
	return n, nil
}

// TestKillInTheMiddleOfPut: SIGKILL while a Put is writing leaves a temporary file that
// Open removes, and no face.
func TestKillInTheMiddleOfPut(t *testing.T) {
	dir := t.TempDir()
	testutil.CrashChild(t, []string{crashDirEnv + "=" + dir, crashModeEnv + "=mid"}, 30*time.Second, time.Millisecond, func(l string) {
		t.Errorf("child said %q after ready", l)
	})
	left := files(t, dir)
	if len(left) != 1 || !strings.HasPrefix(left[0], tempPrefix) {
		t.Fatalf("after the kill the directory holds %v, want one temporary file", left)
	}
	if info, err := os.Stat(dir + "/" + left[0]); err != nil || info.Size() != 512<<10 {
		t.Fatalf("temporary file: %v, %v; want the half written", info, err)
	}
	s := open(t, dir, Options{Logger: slog.New(slog.DiscardHandler)})
	_, sum := face(999, 1<<20)
	if rec := s.Recovery(); rec.TempRemoved != 1 || len(rec.Damaged) != 0 || s.Has(sum) {
		t.Fatalf("recovery %+v, face held %v", rec, s.Has(sum))
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("Open left %v", got)
	}
}

// TestKillsLoseNoStoredFaceAndKeepNoPartOne: Puts SIGKILLed at random moments; after each
// kill every face whose Put returned is there and whole, and nothing else but whole faces
// (VerifyOnOpen hashes each) and no temporary file is left once Open ran.
func TestKillsLoseNoStoredFaceAndKeepNoPartOne(t *testing.T) {
	dir := t.TempDir()
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acked []Sum
	temps := 0
	for iter := range rounds {
		delay := time.Duration(5+rng.IntN(60)) * time.Millisecond
		testutil.CrashChild(t, []string{crashDirEnv + "=" + dir, crashModeEnv + "=loop", crashIterEnv + "=" + strconv.Itoa(iter)},
			30*time.Second, delay, func(l string) {
				sum, err := ParseSum(l)
				if err != nil {
					t.Errorf("child said %q", l)
					return
				}
				acked = append(acked, sum)
			})
		s, err := Open(dir, Options{VerifyOnOpen: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rec := s.Recovery()
		temps += rec.TempRemoved
		if len(rec.Damaged) != 0 || len(rec.Unknown) != 0 {
			t.Fatalf("round %d: recovery %+v", iter, rec)
		}
		for _, sum := range acked {
			if !s.Has(sum) {
				t.Fatalf("round %d: face %s was stored and is gone", iter, sum)
			}
		}
		for _, name := range files(t, dir) {
			if strings.HasPrefix(name, tempPrefix) {
				t.Fatalf("round %d: %s left after Open", iter, name)
			}
		}
		s.Close()
	}
	t.Logf("%d rounds, %d faces stored, %d interrupted Puts cleaned up", rounds, len(acked), temps)
	if len(acked) == 0 {
		t.Fatal("no Put returned before any kill: the test tested nothing")
	}
}
