package e2e

import (
	"fmt"
	"os"
	"strings"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// soakDiskBoundKB is what data_dir may occupy in TestDaemonSoak (du: preallocated blocks
// counted), from its journals' bounds (docs/operations.md, "Disk") with this run's config:
// the outbox's open segment (64 MiB reserved) plus max(16 MiB, L) written since its
// snapshot and the snapshot twice while a new one is written (L, its live records: a few
// hundred queued tasks and unreported results, well under 1 MiB here) and payloads.cache
// (twice the queued payloads plus 1 MiB); forward/ and deadletter/ at most 2×B + max(4 MiB,
// B) + 4 MiB each with B under 1 MiB here (the upstream takes reports as they come); whitelist/
// its snapshot plus max(4 MiB, S) since (S: five lists of at most 30 persons); syncreports/
// as forward/; broker-sessions/ 2×L + max(4 MiB, L) + 4 MiB (little waits in the kept
// sessions); faces/ the pool (under 16 KiB, 4 KiB blocks each); the state store's keys
// (tens). Summed: 64 + 16 + 2 + 3 (outbox) + 4 × 10 (forward, deadletter, syncreports,
// broker-sessions, each with B ≤ 1 MiB) + 9 (whitelist) + 1 (faces and the rest) MiB.
const soakDiskBoundKB = (64 + 16 + 2 + 3 + 4*10 + 9 + 1) << 10

// report logs the samples as a table and writes them as CSV to $FACEAGENT_SOAK_OUT.
func (s *soakRun) report() {
	csv := soakTable(s.samples)
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	results, dead := s.outcomes()
	copies := 0
	for _, rs := range results {
		copies += len(rs) - 1
	}
	loadSecs := 0.0
	for i, x := range s.samples {
		if x.phase == "load" && i > 0 {
			loadSecs += (x.at - s.samples[i-1].at).Seconds()
		}
	}
	s.t.Logf("samples:\n%s", csv)
	s.t.Logf("summary: %d tasks (%.1f a second under load), %d results (%d copies after the SIGKILL), %d deadletters; "+
		"RSS %d → %d kB, goroutines %d → %d, fds %d → %d, heap %d → %d kB, data_dir %d → %d kB (du), %d → %d kB (files); baseline after the restart: %d goroutines, %d fds, %d kB RSS",
		len(s.taken), float64(last.tasks-first.tasks)/max(loadSecs, 1), len(results), copies, len(dead),
		first.rssKB, last.rssKB, first.goroutines, last.goroutines, first.fds, last.fds, first.heapKB, last.heapKB,
		first.diskKB, last.diskKB, first.filesKB, last.filesKB, s.base.goroutines, s.base.fds, s.base.rssKB)
	if out := os.Getenv("FACEAGENT_SOAK_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(csv), 0o644); err != nil {
			s.t.Errorf("FACEAGENT_SOAK_OUT: %v", err)
		}
	}
}

// checkResults: every taken task has exactly one result (its copies, delivered again after
// the SIGKILL, carry the same messageId and status), a failure with a reason, or — the
// tasks sent to be refused, and only those — a deadletter with a reason.
func (s *soakRun) checkResults() {
	results, dead := s.outcomes()
	var bad []string
	for _, id := range s.taken {
		rs, d := results[id], dead[id]
		switch {
		case s.refused[id]:
			if len(rs) > 0 || !strings.Contains(d.Reason, "hashes to") {
				bad = append(bad, fmt.Sprintf("%s: want a deadletter for its face, got %q and results %s", id, d.Reason, resultLines(rs)))
			}
		case d.Reason != "":
			bad = append(bad, fmt.Sprintf("%s: dead-lettered: %s", id, d.Reason))
		case len(rs) == 0:
			bad = append(bad, id+": no result")
		default:
			for _, r := range rs[1:] {
				if r.MessageID != rs[0].MessageID || r.Status != rs[0].Status {
					bad = append(bad, fmt.Sprintf("%s: two results: %s", id, resultLines(rs)))
					break
				}
			}
			switch r := rs[0]; r.Status {
			case wire.Succeeded, wire.Superseded:
			case wire.Failed:
				if r.Error == "" {
					bad = append(bad, fmt.Sprintf("%s: failed without a reason: %s", id, resultLine(r)))
				}
			default:
				bad = append(bad, fmt.Sprintf("%s: status %q", id, r.Status))
			}
		}
	}
	if len(bad) > 0 {
		s.t.Errorf("%d of %d tasks without exactly one right outcome:\n%s", len(bad), len(s.taken), strings.Join(bad[:min(len(bad), 20)], "\n"))
	}
	for _, f := range s.fleets {
		if err := f.Violations(); err != nil {
			s.t.Error(err)
		}
	}
}

// checkResources: goroutines and descriptors back to the idle baseline, RSS of the last
// third within soakRSSMarginKB of the first third's peak, data_dir within soakDiskBoundKB.
func (s *soakRun) checkResources() {
	end := s.samples[len(s.samples)-1]
	if end.goroutines > s.base.goroutines+soakGoroutineSlack {
		s.t.Errorf("goroutines idle at the end: %d, at the baseline %d (slack %d)", end.goroutines, s.base.goroutines, soakGoroutineSlack)
	}
	if end.fds > s.base.fds+soakFDSlack {
		s.t.Errorf("open descriptors idle at the end: %d, at the baseline %d (slack %d)", end.fds, s.base.fds, soakFDSlack)
	}
	var life []soakSample // the restarted agent's, from its baseline on
	for _, x := range s.samples {
		if x.pid == end.pid && x.at >= s.base.at {
			life = append(life, x)
		}
	}
	firstRSS, lastRSS := soakThirds(life, func(x soakSample) int64 { return x.rssKB })
	if margin := int64(soakRSSMarginKB); lastRSS > firstRSS+margin {
		s.t.Errorf("RSS grows: peak %d kB in the last third of the restarted agent's life, %d kB in the first (margin %d kB)", lastRSS, firstRSS, margin)
	}
	firstHeap, lastHeap := soakThirds(life, func(x soakSample) int64 { return x.heapKB })
	s.t.Logf("restarted agent, first third → last third peaks: RSS %d → %d kB, heap %d → %d kB", firstRSS, lastRSS, firstHeap, lastHeap)
	s.t.Logf("quiet at the end (free memory given back): RSS %d kB, heap %d kB", s.endQuiet.rssKB, s.endQuiet.heapKB)
	for _, x := range s.samples {
		if x.diskKB > soakDiskBoundKB {
			s.t.Errorf("data_dir occupies %d kB at %.0f s, over its bound %d kB", x.diskKB, x.at.Seconds(), soakDiskBoundKB)
			break
		}
	}
}
