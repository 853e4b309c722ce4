package mqtt

import (
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The tasks of the event loop, as indexes into the channels TakeOverLoopTicks returns.
//
// faceagent patch (idle): see TakeOverLoopTicks.
const (
	LoopSysTopics = iota
	LoopClientExpiry
	LoopInflightExpiry
	LoopRetainedExpiry
	LoopWillDelaySend
	LoopTasks
)

// LoopTicks are the channels that drive the event loop once its tickers are taken over,
// and the will messages waiting for their delay (which the caller needs to know when the
// next one is due).
type LoopTicks struct {
	C           [LoopTasks]chan time.Time
	WillDelayed *packets.Packets
}

// TakeOverLoopTicks stops the five tickers of the server's event loop ($SYS topics, and
// every second the expiry of sessions, inflight and retained messages, and delayed wills)
// and returns channels that stand in for them: the loop does a task's work when its
// channel gets a value, as it did on each tick. Call it once, before Serve.
//
// faceagent patch (idle): none of the tickers can be turned off through Options, so an
// idle broker woke five times a second; the agent's housekeeper ticks the loop only when
// something is due. Before this patch it replaced the unexported tickers with reflect and
// unsafe.
func (s *Server) TakeOverLoopTicks() *LoopTicks {
	l := s.loop
	tickers := [LoopTasks]**time.Ticker{&l.sysTopics, &l.clientExpiry, &l.inflightExpiry, &l.retainedExpiry, &l.willDelaySend}
	lt := &LoopTicks{WillDelayed: l.willDelayed}
	for i, t := range tickers {
		(*t).Stop()
		lt.C[i] = make(chan time.Time, 1)
		// A Ticker made as a literal is just its channel: the loop reads C, and Stop does
		// nothing.
		*t = &time.Ticker{C: lt.C[i]}
	}
	return lt
}
