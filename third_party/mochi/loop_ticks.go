package mqtt

import (
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The tasks of the event loop, as indexes into LoopTicks.C.
//
// faceagent patch (idle): see newLoop.
const (
	LoopSysTopics = iota
	LoopClientExpiry
	LoopInflightExpiry
	LoopRetainedExpiry
	LoopWillDelaySend
	LoopTasks
)

// LoopTicks are the channels that drive the event loop in place of its tickers
// (Options.LoopTicks), and the will messages waiting for their delay (which the caller
// needs to know when the next one is due).
type LoopTicks struct {
	C           [LoopTasks]chan time.Time
	WillDelayed *packets.Packets
}

// NewLoopTicks makes the channels for Options.LoopTicks, each with room for one tick.
func NewLoopTicks() *LoopTicks {
	lt := new(LoopTicks)
	for i := range lt.C {
		lt.C[i] = make(chan time.Time, 1)
	}
	return lt
}

// newLoop makes the event loop's tickers, or with opts.LoopTicks set, stand-ins that are
// just its channels (the loop reads a ticker's C; Stop does nothing on a Ticker made as a
// literal), and sets opts.LoopTicks.WillDelayed.
//
// faceagent patch (idle): none of the tickers could be turned off through Options, so an
// idle broker woke five times a second; the agent's housekeeper ticks the loop only when
// something is due.
func newLoop(opts *Options) *loop {
	l := &loop{willDelayed: packets.NewPackets()}
	tickers := [LoopTasks]**time.Ticker{&l.sysTopics, &l.clientExpiry, &l.inflightExpiry, &l.retainedExpiry, &l.willDelaySend}
	if lt := opts.LoopTicks; lt != nil {
		lt.WillDelayed = l.willDelayed
		for i, t := range tickers {
			*t = &time.Ticker{C: lt.C[i]}
		}
		return l
	}
	for i, t := range tickers {
		every := time.Second
		if i == LoopSysTopics {
			every = time.Second * time.Duration(opts.SysTopicResendInterval)
		}
		*t = time.NewTicker(every)
	}
	return l
}
