package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// WhitelistDir is the desired whitelists' journal directory inside agent.data_dir.
const WhitelistDir = "whitelist"

// desiredLists is the intake's view (intake.Desired) of the desired whitelists: a task's
// person becomes the store's record (the rev the back office may have sent is ignored: the
// store computes the agent's own from the record). changed, if set, is told of each
// terminal whose list a task changed or an undo put back; setWhitelist of each terminal
// whose list a SetWhitelist task replaced (after changed).
//
// A SetWhitelist task is kept by the store with the list change, in one journal record,
// counts and all (ErrKept: it goes to no outbox); the reconciler gives it its result.
type desiredLists struct {
	s            *whitelist.Store
	changed      func(dev string)
	setWhitelist func(dev string)
}

var _ intake.Desired = desiredLists{}

func (d desiredLists) Flush() error { return d.s.Flush() }

func (d desiredLists) Apply(t *wire.Task) (undo func() error, counts *wire.WhitelistCounts, err error) {
	dev := t.DeviceID
	switch t.Op {
	case face.AddPerson:
		undo = d.restorer(dev, t.Person.ID)
		r := record(&t.Person)
		if len(t.Faces) > 0 {
			r.Face = t.Faces[0].Ref()
		}
		err = d.s.Set(dev, r)
	case face.DeletePerson:
		undo = d.restorer(dev, t.Person.ID)
		err = d.s.Delete(dev, t.Person.ID)
	case wire.SetWhitelist:
		list := make([]whitelist.Record, len(t.Persons))
		for i := range t.Persons {
			list[i] = record(&t.Persons[i])
		}
		for _, f := range t.Faces {
			list[f.Person].Face = f.Ref()
		}
		// The counts stay with the task: its result carries them.
		_, err := d.s.ReplaceTask(dev, list, whitelist.SetTask{MessageID: t.MessageID(), TaskID: t.TaskID})
		switch {
		case errors.Is(err, whitelist.ErrDuplicateTask):
			return nil, nil, intake.ErrKept // a redelivery: taken already, once
		case err != nil:
			return nil, nil, refusal(dev, err)
		}
		if d.changed != nil {
			d.changed(dev)
		}
		if d.setWhitelist != nil {
			d.setWhitelist(dev)
		}
		return nil, nil, intake.ErrKept
	default:
		return nil, nil, fmt.Errorf("%w: op %q keeps no desired state", intake.ErrRefused, t.Op)
	}
	if err != nil {
		return nil, nil, refusal(dev, err)
	}
	if d.changed != nil {
		d.changed(dev)
		restore := undo
		undo = func() error {
			err := restore()
			d.changed(dev)
			return err
		}
	}
	return undo, counts, nil
}

// record is the store's record of a task's person, without its face (Task.Faces holds
// it; the intake filled in the size of a face sent without data).
func record(p *face.Person) whitelist.Record {
	return whitelist.Record{ID: p.ID, Name: p.Name, ValidFrom: p.ValidFrom, ValidTo: p.ValidTo}
}

// restorer returns what puts the person id on dev back as it is now: its record, or no
// record (a person a refusal excluded is not desired either way, so it comes back as
// absent), or no list at all for a terminal the store did not know.
//
// One closure per case, each capturing only what it needs: the intake makes one for every
// task, and most (a person new to a known terminal) need no record.
func (d desiredLists) restorer(dev, id string) func() error {
	s := d.s
	if known, _ := s.Known(dev); !known {
		return func() error { return s.Forget(dev) }
	}
	r, ok := s.Get(dev, id)
	if !ok {
		return func() error { return s.Delete(dev, id) }
	}
	return func() error { return s.Set(dev, r) }
}

// refusal words the store's refusals for the deadletter, naming the config key of the
// bound; other errors (the journal failing, the store closed) pass unchanged.
func refusal(dev string, err error) error {
	switch {
	case errors.Is(err, whitelist.ErrTooManyTerminals):
		return fmt.Errorf("%w: desired whitelists of too many terminals (whitelist.max_terminals)", intake.ErrRefused)
	case errors.Is(err, whitelist.ErrTooManyPersons):
		return fmt.Errorf("%w: terminal %q: its desired whitelist would hold too many persons (whitelist.max_persons)", intake.ErrRefused, dev)
	case errors.Is(err, whitelist.ErrTooManyRecords):
		return fmt.Errorf("%w: too many distinct person records across terminals (whitelist.max_records)", intake.ErrRefused)
	case errors.Is(err, whitelist.ErrTooManySetTasks):
		return fmt.Errorf("%w: too many SetWhitelist tasks pending or waiting for their results to be reported (whitelist.max_set_tasks)", intake.ErrRefused)
	case errors.Is(err, whitelist.ErrDuplicateID), errors.Is(err, whitelist.ErrInvalid):
		return fmt.Errorf("%w: %w", intake.ErrRefused, err)
	}
	return err
}

// openWhitelist opens the desired whitelists in data_dir/whitelist with [whitelist]'s
// bounds and [journal]'s sync policy: a task's change there is as durable as the task.
func openWhitelist(cfg *config.Config, log *slog.Logger) (*whitelist.Store, error) {
	return whitelist.Open(filepath.Join(cfg.Agent.DataDir, WhitelistDir), whitelist.Options{
		Journal:      syncOptions(cfg.Journal),
		MaxTerminals: cfg.Whitelist.MaxTerminals,
		MaxPersons:   cfg.Whitelist.MaxPersons,
		MaxRecords:   cfg.Whitelist.MaxRecords,
		MaxSetTasks:  cfg.Whitelist.MaxSetTasks,
		Logger:       log.With("part", "whitelist"),
	})
}
