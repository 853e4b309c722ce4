package attack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/sswire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// What every setup configures, and the bounds derived from it.
const (
	gateway = "gw-attack"
	// gomemlimit is agent.gomemlimit. The Go runtime holds heap, stacks and its own
	// structures near it; the binary's mapped text and data come on top. So RSS must
	// stay under gomemlimit plus the binary's size (rssBound).
	gomemlimit = 48 << 20
	// maxClients is broker.max_clients: connections past CONNECT.
	maxClients = 64
	// fdSlack is what the agent may open beside its clients' sockets while it serves:
	// journal segments rolled over, a /metrics connection, files being compacted.
	fdSlack = 16
	// dataSlack and dataPerSecond bound how much data_dir may grow during an attack with
	// nothing but the traffic: its journals' records of about 50 tasks a second (each
	// with its command, ack and result, about 1 KiB together: 50 KiB/s measured),
	// doubled, and a few segments rolled over.
	dataSlack     = 4 << 20
	dataPerSecond = 128 << 10
	// logSlack is the log growth allowed during one attack besides the attack's own
	// budget: the traffic logs nothing at the info level, connections a line or two.
	logSlack = 16 << 10
	// startTimeout bounds the agent's start-up (the "faceagent running" line).
	startTimeout = 30 * time.Second
)

// terminals are the configured devices; each runs as a simulated terminal.
var terminals = []string{"t1", "t2"}

// setup is one configuration the agent runs under while it is attacked.
type setup struct {
	name  string
	users bool // a users file (users below) and allow_anonymous = false
	mtls  bool // the broker's listener is TLS and wants client certificates
	// tmpfs puts data_dir on a tmpfs of this many bytes, mounted in a mount namespace
	// of the agent's own (unshare, then nsenter for every run), so that the test can
	// fill the disk under it.
	tmpfs int64
	// nofile is RLIMIT_NOFILE (soft and hard) of the agent, set with prlimit(1); 0 keeps
	// the test's.
	nofile int
	// broker is more [broker] keys, one "key = value" a line.
	broker string
}

// Users of the users file (setup.users). The back office and each terminal have an
// account with what they need; mallory and victim may only use the state store under
// their own prefix and their own clients/%c/ topics. Each password is the name followed
// by "-secret"; the hashes are bcrypt at cost 10 (what doc.go recommends, so that a
// refused login costs the agent what it costs in the field), made once: hashing them
// for every test took seconds under the race detector.
var userHashes = map[string]string{
	"backoffice": "$2a$10$DB8UPIda4ZeP27chvaj90OtphY0qjMPUYRXwoMGPbeVHZH1KAkQRq",
	"t1":         "$2a$10$46j00O5izZJoLNgSjQf8W..DbZ992xnMWe1CJ0Mn.ELrAQRHF/DbC",
	"t2":         "$2a$10$pSy5XfsU.sY4yDnfTjYn4.nRPQE4IlBS1lT3vJycGZQzamEZnM4kK",
	"mallory":    "$2a$10$c/hDs93v64g1oPIKvOIhFOgijxqVWX8S8ZP9KOLBa..Jx/Y8MGbym",
	"victim":     "$2a$10$N5qg92lWCTXK.wWEp9TCceVQgmVf1ZTBQyNv5sQ6Beyas/K9Z0H.G",
}

// password is user's password in the users file.
func password(user string) string { return user + "-secret" }

// usersFile is the users file of the users setup. certCN, when set, is the Common Name of
// the one client certificate every user presents in the mtls setup: each user lists it
// (certificate_cn), since the broker ties a certificate to the users it names.
func usersFile(certCN string) string {
	var b strings.Builder
	add := func(name string, rules string) {
		fmt.Fprintf(&b, "[[users]]\nname = %q\npassword_hash = %q\n%s\n", name, userHashes[name], rules)
		if certCN != "" {
			fmt.Fprintf(&b, "certificate_cn = [%q]\n", certCN)
		}
	}
	add("backoffice", fmt.Sprintf("publish = [%q]\nsubscribe = [%q]\nread_keys = [%q]\nwrite_keys = [%q, %q]",
		"faceagent/"+gateway+"/tasks", "faceagent/"+gateway+"/#", "faceagent/"+gateway+"/",
		"faceagent/"+gateway+"/config", "faceagent/"+gateway+"/control"))
	for _, id := range terminals {
		add(id, `publish = ["dev/face/%u/Ack", "dev/face/%u/heartbeat"]`+"\n"+
			`subscribe = ["dev/face/%u"]`+"\nread_keys = []\nwrite_keys = []")
	}
	for _, name := range []string{"mallory", "victim"} {
		add(name, fmt.Sprintf("publish = [%q, \"clients/%%c/#\"]\nsubscribe = [\"clients/%%c/#\"]\nread_keys = [%q]\nwrite_keys = [%q]",
			sswire.InvokeTopic, name+"/", name+"/"))
	}
	return b.String()
}

// system is a faceagent under attack, with its traffic and its monitor.
type system struct {
	t     *testing.T
	setup setup
	dir   string // the test's directory: config, users file, certificates

	// dataDir is data_dir as the agent sees it; dataView the same directory as this
	// process sees it (through /proc/PID/root when data_dir is on the agent's tmpfs).
	dataDir, dataView string
	cfgPath           string
	brokerAddr        string // fixed across restarts, so that clients find it again
	metricsAddr       string
	pki               *pki // setup.mtls

	holder *exec.Cmd // setup.tmpfs: the process that keeps the mount namespace
	log    *logSink  // everything every run of the agent wrote
	proc   *agentProc
	mon    *monitor
	tr     *traffic

	// baseFDs is the agent's descriptors once the traffic runs, before any attack.
	baseFDs int
}

// agentProc is one run of the agent.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	err  error         // Wait's result, set before done closes
}

// start writes the setup's config, starts the agent and, once it runs, the traffic and
// the monitor. Everything is stopped when the test ends (the agent with SIGTERM, which
// must end it cleanly).
func start(t *testing.T, su setup) *system {
	t.Helper()
	s := &system{t: t, setup: su, dir: t.TempDir(), log: &logSink{}}
	s.brokerAddr = testutil.FreeAddr(t)
	s.metricsAddr = testutil.FreeAddr(t)
	s.dataDir = filepath.Join(s.dir, "data")
	s.dataView = s.dataDir
	if su.mtls {
		s.pki = newPKI(t, s.dir)
	}
	s.cfgPath = filepath.Join(s.dir, "agent.toml")
	if err := os.WriteFile(s.cfgPath, []byte(s.config()), 0o600); err != nil {
		t.Fatal(err)
	}
	if su.nofile > 0 {
		lookPath(t, "prlimit")
	}
	if su.tmpfs > 0 {
		s.mountTmpfs()
	}
	t.Cleanup(s.shutdown)
	s.run()
	s.tr = startTraffic(t, s)
	s.mon = startMonitor(s)
	s.baseFDs = s.mon.now().fds
	t.Logf("%s: agent pid %d, broker %s, %d descriptors, RSS %d KiB once serving",
		su.name, s.proc.cmd.Process.Pid, s.brokerAddr, s.baseFDs, s.mon.now().rss>>10)
	return s
}

func (s *system) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\ngateway_id = %q\ndata_dir = %q\ngomemlimit = \"%dMiB\"\n", gateway, s.dataDir, gomemlimit>>20)
	fmt.Fprintf(&b, "[broker]\nlisten = %q\nmax_clients = %d\n", s.brokerAddr, maxClients)
	if s.setup.users {
		path := filepath.Join(s.dir, "users.toml")
		certCN := ""
		if s.pki != nil {
			certCN = clientCN
		}
		if err := os.WriteFile(path, []byte(usersFile(certCN)), 0o600); err != nil {
			s.t.Fatal(err)
		}
		fmt.Fprintf(&b, "users_file = %q\nallow_anonymous = false\n", path)
	}
	if s.pki != nil {
		fmt.Fprintf(&b, "tls_cert = %q\ntls_key = %q\ntls_client_ca = %q\n", s.pki.serverCert, s.pki.serverKey, s.pki.caFile)
	}
	b.WriteString(s.setup.broker)
	fmt.Fprintf(&b, "[metrics]\nlisten = %q\n", s.metricsAddr)
	// batch: the journal still fsyncs before it acknowledges, fewer times a second.
	b.WriteString("[journal]\nsync = \"batch\"\n")
	b.WriteString("[dispatch]\nretry_interval = \"1s\"\nheartbeat_timeout = \"10s\"\n")
	b.WriteString("[store]\nwrite_interval = \"200ms\"\n")
	fmt.Fprintf(&b, "[intake]\nmax_message_size = %d\n", maxMessageSize)
	for _, id := range terminals {
		fmt.Fprintf(&b, "[[devices]]\nid = %q\n", id)
	}
	return b.String()
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("needs %s (util-linux): %v", name, err)
	}
	return p
}

// mountTmpfs starts the holder: a process in a new user and mount namespace (unshare,
// unprivileged) that mounts a tmpfs of setup.tmpfs bytes on dataDir and sleeps. Every
// run of the agent enters that namespace (nsenter), so data_dir survives restarts;
// this process reaches it through /proc/HOLDER/root.
func (s *system) mountTmpfs() {
	lookPath(s.t, "unshare")
	lookPath(s.t, "nsenter")
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		s.t.Fatal(err)
	}
	script := `mount -t tmpfs -o size="$1" tmpfs "$2" && echo mounted && exec sleep 100000`
	s.holder = exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
		strconv.FormatInt(s.setup.tmpfs, 10), s.dataDir)
	out := &logSink{}
	s.holder.Stdout, s.holder.Stderr = out, out
	if err := s.holder.Start(); err != nil {
		s.t.Skipf("needs unshare: %v", err)
	}
	held := make(chan struct{})
	go func() { _ = s.holder.Wait(); close(held) }()
	s.t.Cleanup(func() { _ = s.holder.Process.Kill(); <-held })
	if _, ok := out.waitFor(regexp.MustCompile(`^mounted$`), 0, 10*time.Second, held); !ok {
		s.t.Skipf("needs a tmpfs in an unprivileged mount namespace: %s", out.String())
	}
	s.dataView = fmt.Sprintf("/proc/%d/root%s", s.holder.Process.Pid, s.dataDir)
}

// argv is the command line of one run: the binary, behind nsenter (tmpfs) and prlimit
// (nofile) when the setup asks for them. Both exec the next program in the same
// process, so the agent's pid is the one started.
func (s *system) argv() []string {
	var argv []string
	if s.holder != nil {
		argv = append(argv, "nsenter", "--target", strconv.Itoa(s.holder.Process.Pid), "--user", "--mount",
			"--preserve-credentials", "--")
	}
	if s.setup.nofile > 0 {
		n := strconv.Itoa(s.setup.nofile)
		argv = append(argv, "prlimit", "--nofile="+n+":"+n, "--")
	}
	return append(argv, binary, "-config", s.cfgPath)
}

var runningRe = regexp.MustCompile(`msg="faceagent running"`)

// run starts the agent and waits until it serves.
func (s *system) run() {
	s.t.Helper()
	argv := s.argv()
	from := s.log.Len()
	p := &agentProc{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = s.log, s.log
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	s.proc = p
	if _, ok := s.log.waitFor(runningRe, from, startTimeout, p.done); !ok {
		_ = p.cmd.Process.Kill()
		<-p.done
		s.t.Fatalf("faceagent did not start (%v):\n%s", p.err, s.log.String()[from:])
	}
}

// restart stops the agent with SIGTERM (a clean stop: exit 0) and starts it again on the
// same data_dir and addresses, as systemd does after a failed health check.
func (s *system) restart() {
	s.t.Helper()
	if code := s.stop(); code != 0 {
		s.t.Fatalf("SIGTERM: exit %d\n%s", code, s.log.tail(4096))
	}
	s.run()
	s.mon.follow(s.proc.cmd.Process.Pid)
}

// stop ends the agent with SIGTERM and returns its exit code (-1: killed after 30 s).
func (s *system) stop() int {
	p := s.proc
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return -1
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// alive fails the test if the agent exited.
func (s *system) alive() {
	s.t.Helper()
	select {
	case <-s.proc.done:
		s.t.Fatalf("faceagent exited: %v\n%s", s.proc.err, s.log.tail(8192))
	default:
	}
}

// shutdown stops the traffic, the monitor and the agent; a stop that is not clean fails
// the test, and a failed test gets the end of the agent's log.
func (s *system) shutdown() {
	if s.tr != nil {
		s.tr.stop()
	}
	if s.mon != nil {
		s.mon.stop()
	}
	if s.proc == nil {
		return
	}
	select {
	case <-s.proc.done: // alive already reported it
	default:
		if code := s.stop(); code != 0 {
			s.t.Errorf("faceagent did not stop cleanly on SIGTERM: exit %d", code)
		}
	}
	if s.t.Failed() {
		s.t.Logf("faceagent log (last 16 KiB):\n%s", s.log.tail(16<<10))
	}
}

// healthz returns the status code of GET /healthz (0 when it does not answer).
func (s *system) healthz() int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.metricsAddr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitHealthz waits until /healthz answers code.
func (s *system) waitHealthz(code int, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for got := s.healthz(); got != code; got = s.healthz() {
		if time.Now().After(deadline) {
			s.t.Fatalf("/healthz answered %d for %v, want %d", got, within, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logSink collects a process's output; waitFor finds lines in it.
type logSink struct {
	mu   sync.Mutex
	b    bytes.Buffer
	wake chan struct{}
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return l.b.Write(p)
}

// Len is the bytes written so far.
func (l *logSink) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logSink) tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// waitFor waits for a line matching re written after byte from, until within passes or
// stop closes; it returns the line.
func (l *logSink) waitFor(re *regexp.Regexp, from int, within time.Duration, stop <-chan struct{}) (string, bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if l.wake == nil {
			l.wake = make(chan struct{})
		}
		wake := l.wake
		text := l.b.String()
		l.mu.Unlock()
		if from < len(text) {
			for _, line := range strings.Split(text[from:], "\n") {
				if re.MatchString(line) {
					return line, true
				}
			}
		}
		select {
		case <-wake:
		case <-stop:
			return "", false
		case <-timer.C:
			return "", false
		}
	}
}
