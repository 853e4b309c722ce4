package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/seed0e69bba5/faceagent/device/sim"
)

// writeSummary prints one line per terminal.
func writeSummary(w io.Writer, stats []sim.Stats) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tdevice\tonline\tpersons\tfaces\trecv\tdup\tacked\trefused\tlost\tcrash\toff\tdrop\tjunk\thb\tbatch\tcut\tviol\t\n",
		time.Now().Format("15:04:05"))
	for _, s := range stats {
		online := "yes"
		if !s.Online {
			online = "NO"
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.DeviceID, online, s.Persons,
			s.Faces, s.Received, s.Duplicates, s.Acked, s.Refused, s.AcksLost, s.Crashes, s.Offline, s.Dropped, s.Garbage,
			s.Heartbeats, s.Batches, s.FaceCuts, s.Violations)
	}
	tw.Flush()
}
