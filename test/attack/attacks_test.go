package attack

import (
	"os"
	"slices"
	"testing"
	"time"
)

// The setups of TestAttacks: the configurations the agent was attacked under.
var (
	anonymous = setup{name: "anonymous"} // the default: anyone may connect and do anything
	users     = setup{name: "users", users: true}
	mtls      = setup{name: "mtls", users: true, mtls: true}
	diskFull  = setup{name: "tmpfs", tmpfs: 20 << 20}
	fewFiles  = setup{name: "nofile", nofile: 512}
)

// attack is one row of the table: what to run, against which setups, and what it may
// cost the agent beyond the setup's bounds.
type attack struct {
	name string
	on   []setup
	run  func(t *testing.T, s *system)
	// sockets is how many connections the attack holds open at once: the agent's
	// descriptors may grow by that much (plus fdSlack).
	sockets int
	// logBudget is the log bytes the attack may cause beyond logSlack (an attack that
	// may be logged for each of its messages: lineBytes each); dataBudget the data_dir
	// growth beyond dataSlack.
	logBudget, dataBudget int64
	// rssGrowth, when set, bounds the growth of RSS over the attack besides rssBound: the
	// bytes a configured bound lets the agent hold, with room for the garbage collector.
	rssGrowth int64
	// quiet replaces quietBound as the longest the terminals may go without a command,
	// and the back office without a result, during the attack (an attack that stops
	// intake on purpose); -1: not checked.
	quiet time.Duration
}

// lineBytes is the most one logged event may take: a line with its time, level, message,
// client id and reason.
const lineBytes = 256

// attacks are the attacks that hold, each run against the live agent of each of its
// setups, in this order.
var attacks = []attack{
	{name: "malformed-resp3", on: []setup{anonymous, users, mtls, fewFiles}, run: malformedRESP3, sockets: 1, logBudget: 8 << 10},
	{name: "forbidden-response-topics", on: []setup{anonymous, users}, run: forbiddenResponseTopics, sockets: 1, logBudget: 8 << 10},
	{name: "acl-matrix", on: []setup{users, mtls}, run: aclMatrix, sockets: 4, logBudget: 16 << 10},
	{name: "malformed-mqtt", on: []setup{anonymous, mtls, fewFiles}, run: malformedMQTT, sockets: malformedConcurrency,
		logBudget: int64(malformedCrafted+malformedRandom) * lineBytes},
	{name: "bad-tasks", on: []setup{anonymous, users, diskFull}, run: badTasks, sockets: 1,
		logBudget: int64(badTaskRounds*badTaskCases) * lineBytes, dataBudget: 4 << 20},
	{name: "bad-terminal-input", on: []setup{anonymous}, run: badTerminalInput, sockets: 1, logBudget: 64 << 10},
	{name: "refused-logins", on: []setup{users}, run: refusedLogins, sockets: loginConcurrency, logBudget: 64 << 10},
	{name: "tls-client-certificates", on: []setup{mtls}, run: tlsClientCertificates, sockets: 1, logBudget: 64 << 10},
	{name: "slowloris", on: []setup{anonymous}, run: slowloris, sockets: slowlorisSockets, logBudget: 64 << 10},
	// Last: it restarts the agent.
	{name: "disk-full", on: []setup{diskFull}, run: diskFullUnderTaskJournal, sockets: 1, logBudget: 64 << 10,
		dataBudget: 20 << 20, quiet: -1},
}

// TestAttacks runs every attack that holds against a live agent per setup, with the
// terminals and the back office served throughout, and checks after each that serving
// went on and that the agent's resources stayed within the bounds.
func TestAttacks(t *testing.T) {
	for _, su := range []setup{anonymous, users, mtls, diskFull, fewFiles} {
		t.Run(su.name, func(t *testing.T) {
			var mine []attack
			for _, a := range attacks {
				if slices.ContainsFunc(a.on, func(o setup) bool { return o.name == su.name }) {
					mine = append(mine, a)
				}
			}
			s := start(t, su)
			for _, a := range mine {
				t.Run(a.name, func(t *testing.T) { runAttack(t, s, a) })
				select {
				case <-s.proc.done:
					return // the agent is gone: nothing left to attack
				default:
				}
			}
		})
	}
}

// rssBound is the most resident memory the agent may have: gomemlimit for what the Go
// runtime manages, plus the binary's size for its mapped text and data.
func rssBound(t *testing.T) int64 {
	info, err := os.Stat(binary)
	if err != nil {
		t.Fatal(err)
	}
	return gomemlimit + info.Size()
}

// runAttack runs a against s, then checks that the bounds held and that serving went on.
func runAttack(t *testing.T, s *system, a attack) {
	s.mon.reset()
	a.run(t, s)
	w := s.mon.reset()
	t.Logf("%s: %s", a.name, w)
	s.alive()
	checkBounds(t, s, w, a.sockets, a.logBudget, a.dataBudget)
	if grew := w.peak.rss - w.start.rss; a.rssGrowth > 0 && grew > a.rssGrowth {
		t.Errorf("RSS grew by %d KiB, bound %d KiB", grew>>10, a.rssGrowth>>10)
	}
	quiet := quietBound
	if a.quiet != 0 {
		quiet = a.quiet
	}
	if quiet > 0 && w.peak.quietFor > quiet {
		t.Errorf("the terminals went %v without a command during the attack (bound %v)", w.peak.quietFor, quiet)
	}
	if quiet > 0 && w.peak.resultsQuietFor > quiet {
		t.Errorf("the back office went %v without a result during the attack (bound %v)", w.peak.resultsQuietFor, quiet)
	}
	s.tr.checkServing(t)
}

// checkBounds fails t for every peak of w over its bound.
func checkBounds(t *testing.T, s *system, w window, sockets int, logBudget, dataBudget int64) {
	t.Helper()
	if bound := rssBound(t); w.peak.rss > bound {
		t.Errorf("RSS peaked at %d KiB, bound %d KiB (gomemlimit %d MiB + the binary)", w.peak.rss>>10, bound>>10, gomemlimit>>20)
	}
	fds := s.baseFDs + sockets + fdSlack
	if s.setup.nofile > 0 {
		fds = min(fds, s.setup.nofile)
	}
	if w.peak.fds > fds {
		t.Errorf("%d descriptors open at the peak, bound %d (%d serving + %d the attack holds + %d slack)",
			w.peak.fds, fds, s.baseFDs, sockets, fdSlack)
	}
	dataBound := dataSlack + dataBudget + int64(w.ended.Sub(w.began).Seconds()*dataPerSecond)
	if grew := w.peak.dataBytes - w.start.dataBytes; grew > dataBound {
		t.Errorf("data_dir grew by %d KiB in %v, bound %d KiB", grew>>10, w.ended.Sub(w.began).Round(time.Second), dataBound>>10)
	}
	if grew := w.peak.logBytes - w.start.logBytes; grew > logSlack+logBudget {
		t.Errorf("the log grew by %d bytes, bound %d:\n%s", grew, logSlack+logBudget, s.log.tail(4096))
	}
}
