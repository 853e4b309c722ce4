package intake

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Desired keeps the terminals' desired whitelists (agent/whitelist's store, adapted by
// the root): what each terminal should hold once every command the outbox holds for it
// was acked. The taker applies each task there in the order it journals the task's
// command in the outbox, and makes it durable (Flush) before the outbox's record.
type Desired interface {
	// Apply applies task's change to its terminal's desired list: AddPerson sets the
	// person's record, DeletePerson removes the person, SetWhitelist replaces the list
	// (counts is then what it changed; nil for the other ops). It applies at once, in
	// memory; Flush makes it durable. undo restores what the task changed; it is called,
	// in the reverse order of the Apply calls, for the tasks the outbox then refused.
	// An error wrapping ErrRefused refuses the task (it is dead-lettered with the error's
	// text); ErrKept says the desired whitelists keep the task themselves, and its result
	// (a SetWhitelist: applied now, or taken already and this is a redelivery): it goes to
	// no outbox; any other error is the store failing (the message is not taken).
	Apply(task *wire.Task) (undo func() error, counts *wire.WhitelistCounts, err error)
	// Flush returns once every change applied before it is durable.
	Flush() error
}

// ErrRefused is wrapped by Desired.Apply's errors for a task the desired state does not
// take (over one of its bounds): the task is dead-lettered.
var ErrRefused = errors.New("over a bound")

// ErrKept is Desired.Apply's answer for a task the desired whitelists keep, with its
// result, themselves (SetWhitelist): taken, and not given to the outbox.
var ErrKept = errors.New("kept by the desired whitelists")

// Known is what the taker asks the outbox before applying a task to the desired
// whitelists: whether the task's command is stored already (agent/outbox's Known).
type Known interface {
	Known(messageID string) bool
}

// refusal is a task the desired whitelists refused: i indexes the message's tasks.
type refusal struct {
	i   int
	err error
}

// applyDesired applies to d, in order, the tasks the outbox does not hold yet, and flushes
// d: the changes are durable before the outbox's records of the same tasks, so that after
// a crash between the two the redelivered message finds its tasks unknown to the outbox
// and applies them again (an AddPerson or DeletePerson applied twice leaves the same
// desired state). A task the outbox holds already (a redelivery after the outbox took it)
// is not applied again: a later task for the same person may have changed the person
// since, and the outbox keeps the first copy's place in the order. It returns the tasks
// (and their indexes and undos) still to be given to the outbox, without those d refused
// or kept (ErrKept: a SetWhitelist, whose list and result the desired whitelists keep;
// kept counts them). A kept task replaced its terminal's whole list: the undos of the
// message's earlier tasks for that terminal are dropped, since undoing one of them (the
// outbox refusing it) would change the list the SetWhitelist set.
func (t *Taker) applyDesired(d Desired, ob Outbox, parsed []wire.Task, tasks []outbox.Task, order []int) (
	[]outbox.Task, []int, []func() error, []refusal, int, error) {
	known, _ := ob.(Known)
	undos := make([]func() error, 0, len(tasks))
	var refused []refusal
	n, kept := 0, 0
	for k := range tasks {
		i := order[k]
		var undo func() error
		if known == nil || !known.Known(tasks[k].MessageID) {
			u, _, err := d.Apply(&parsed[i])
			switch {
			case errors.Is(err, ErrRefused):
				refused = append(refused, refusal{i, err})
				continue
			case errors.Is(err, ErrKept):
				kept++
				for j := range n {
					if tasks[j].DeviceID == tasks[k].DeviceID {
						undos[j] = nil
					}
				}
				continue
			case err != nil:
				if uerr := t.undoDesired(d, undos); uerr != nil {
					err = errors.Join(err, uerr)
				}
				return nil, nil, nil, nil, 0, fmt.Errorf("desired whitelists: %w", err)
			}
			undo = u
		}
		tasks[n], order[n] = tasks[k], i
		undos = append(undos, undo)
		n++
	}
	if err := d.Flush(); err != nil {
		return nil, nil, nil, nil, 0, fmt.Errorf("desired whitelists: %w", err)
	}
	return tasks[:n], order[:n], undos, refused, kept, nil
}

// undoDesired undoes changes in the reverse order of their Apply calls and flushes. The
// outbox refuses a device's tasks from the first one over its bound to the end of the
// message, so the undone changes are the last ones made to their persons.
func (t *Taker) undoDesired(d Desired, undos []func() error) error {
	for k := len(undos) - 1; k >= 0; k-- {
		if undos[k] == nil {
			continue
		}
		if err := undos[k](); err != nil {
			return fmt.Errorf("desired whitelists: undoing a refused task: %w", err)
		}
	}
	if err := d.Flush(); err != nil {
		return fmt.Errorf("desired whitelists: %w", err)
	}
	return nil
}
