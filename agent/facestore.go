package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
)

// FacesDir is the face store's directory inside agent.data_dir.
const FacesDir = "faces"

// openFaces opens the face store in data_dir/faces with [faces]'s budget. The outbox reads
// the faces it sends from it; the intake writes the faces tasks bring (startFaceSweeper).
func openFaces(cfg *config.Config, m *faces.Metrics, log *slog.Logger) (*faces.Store, error) {
	return faces.Open(filepath.Join(cfg.Agent.DataDir, FacesDir), faces.Options{
		MaxBytes: int64(cfg.Faces.MaxBytes), Metrics: m, Logger: log})
}

// startFaceSweeper gives the intake the face store and starts the sweeper that removes the
// faces no desired person refers to: at start, and after changes of the desired whitelists
// (Changed), each sweep reading their faces while no message is half way through the
// intake (take.Quiet: an undo there may bring a replaced record back).
func startFaceSweeper(ctx context.Context, fs *faces.Store, log *slog.Logger, take *intake.Taker, wl *whitelist.Store,
	stops *[]func(context.Context) error) *faces.Sweeper {
	sw := faces.NewSweeper(fs, faces.SweeperOptions{Logger: log, InUse: func() (func(faces.Sum) bool, error) {
		var set map[[32]byte]struct{}
		err := take.Quiet(func() (err error) {
			set, err = wl.Faces()
			return err
		})
		if err != nil {
			return nil, err
		}
		return func(s faces.Sum) bool { _, ok := set[s]; return ok }, nil
	}})
	sctx, cancel := context.WithCancel(ctx)
	sw.Start(sctx)
	*stops = append(*stops, func(context.Context) error { cancel(); sw.Wait(); return nil })
	take.OpenFaces(faceStore{fs})
	return sw
}

// faceStore is the intake's view (intake.Faces) of the face store.
type faceStore struct{ s *faces.Store }

func (f faceStore) Hold() intake.FaceHold { return facePin{s: f.s, p: f.s.Pin()} }

// facePin is a task message's Pin.
type facePin struct {
	s *faces.Store
	p *faces.Pin
}

// Put writes the face from data itself (a bytes.Reader is not copied on the way).
func (p facePin) Put(sha256 string, data []byte) error {
	sum, err := faces.ParseSum(sha256)
	if err != nil {
		return faceRefusal{err}
	}
	err = p.p.Put(sum, int64(len(data)), bytes.NewReader(data))
	if errors.Is(err, faces.ErrBudget) || errors.Is(err, faces.ErrHashMismatch) || errors.Is(err, faces.ErrSize) {
		return faceRefusal{err}
	}
	return err
}

func (p facePin) Keep(sha256 string) (int64, bool) {
	sum, err := faces.ParseSum(sha256)
	if err != nil || !p.p.Keep(sum) {
		return 0, false
	}
	size, _ := p.s.Size(sum) // held: it stays
	return size, true
}

func (p facePin) Release() { p.p.Release() }

// faceRefusal is a face the store refuses: the task is dead-lettered with its text.
type faceRefusal struct{ error }

func (e faceRefusal) Is(target error) bool { return target == intake.ErrRefused }
func (e faceRefusal) Unwrap() error        { return e.error }
