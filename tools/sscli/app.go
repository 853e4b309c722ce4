package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/store"
)

// Exit codes.
const (
	exitOK       = 0
	exitNotFound = 1 // not found, not applied, lease held
	exitError    = 2 // any other error, bad usage
)

// IO is what a command reads and writes; tests inject buffers.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// app is the state shared by the subcommands.
type app struct {
	*IO
	conn connFlags
}

// connFlags are the connection options; each has an environment variable.
type connFlags struct {
	url, tlsCA, cert, key, user, passwordFile, clientID string
	timeout                                             time.Duration
}

// usageError is a command line the tool cannot run; its message is followed by the usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// helpRequest is -h or --help given to a command; it carries the command's flags for the
// help text.
type helpRequest struct{ fs *flag.FlagSet }

func (h helpRequest) Error() string { return flag.ErrHelp.Error() }
func (h helpRequest) Unwrap() error { return flag.ErrHelp }

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// errExit makes Run exit with code without printing anything more (lock: the child's code).
type errExit struct{ code int }

func (e errExit) Error() string { return fmt.Sprintf("exit %d", e.code) }

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, a *app, args []string) error
}

var commands = []command{
	{"get", "KEY [-v] [--decode raw|auto|device-state] [--compact]", "print the value of KEY (-v: its version on stderr; --decode: a device state as JSON)", runGet},
	{"set", "KEY VALUE|@FILE|- [--nx|--nex] [--px 10s] [--fencing HLC] [--persist] [-v]", "store a value", runSet},
	{"del", "KEY [--fencing HLC] [-v]", "delete KEY", runDel},
	{"vdel", "KEY VALUE [--fencing HLC] [-v]", "delete KEY if it holds VALUE", runVDel},
	{"watch", "KEY...", "print changes of the keys until Ctrl-C", runWatch},
	{"lock", "NAME [--ttl 10s] [--holder ID] -- CMD [ARGS...]", "run CMD while holding the lease NAME; stop it if the lease is lost", runLock},
	{"bench", "[-n 10000] [-c 16] [--size 32] [--op set|get]", "measure round trips a second and latency", runBench},
}

const envHelp = `Environment (flags win):
  FACEAGENT_SS_URL            --url            broker URL (default mqtt://127.0.0.1:1883)
  FACEAGENT_SS_TLS_CA         --tls-ca         PEM file of CAs to trust (mqtts://)
  FACEAGENT_SS_CERT           --cert           client certificate PEM file
  FACEAGENT_SS_KEY            --key            client key PEM file
  FACEAGENT_SS_USER           --user           MQTT user name
  FACEAGENT_SS_PASSWORD_FILE  --password-file  file holding the MQTT password
  FACEAGENT_SS_CLIENT_ID      --client-id      MQTT client id (default sscli-<random>)
  FACEAGENT_SS_TIMEOUT        --timeout        per-request timeout (default 10s)
`

const examples = `Examples:
  sscli set greeting hello --px 1m
  sscli get greeting -v
  sscli get --decode auto faceagent/gw-01/devices/2042253
  sscli set config @dispatch.toml --persist
  echo -n on | sscli set feature -
  sscli set lock me --nex --px 10s
  sscli vdel lock me
  sscli watch faceagent/gw-01/config faceagent/gw-01/control
  sscli lock faceagent/gw-01/leader --ttl 10s -- faceagent -config /etc/faceagent.toml
  sscli --url mqtts://store:8883 --tls-ca ca.pem --cert me.pem --key me.key bench -c 64

Exit codes: 0 done, 1 not found / not applied / lease held, 2 error.
lock exits with the command's exit code, or 2 when the lease is lost.
`

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: sscli [connection flags] COMMAND [ARGS]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-6s %s\n         %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, "\nConnection flags:\n")
	fs, _ := globalFlags(&IO{Getenv: func(string) string { return "" }})
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\n%s\n%s", envHelp, examples)
}

func globalFlags(io *IO) (*flag.FlagSet, *connFlags) {
	var c connFlags
	fs := flag.NewFlagSet("sscli", flag.ContinueOnError)
	fs.SetOutput(io.Stderr)
	env := func(name, def string) string {
		if v := io.Getenv(name); v != "" {
			return v
		}
		return def
	}
	timeout, err := time.ParseDuration(env("FACEAGENT_SS_TIMEOUT", "10s"))
	if err != nil {
		timeout = 10 * time.Second
	}
	fs.StringVar(&c.url, "url", env("FACEAGENT_SS_URL", "mqtt://127.0.0.1:1883"), "broker `URL` (mqtt:// or mqtts://)")
	fs.StringVar(&c.tlsCA, "tls-ca", env("FACEAGENT_SS_TLS_CA", ""), "PEM `file` of CAs to trust")
	fs.StringVar(&c.cert, "cert", env("FACEAGENT_SS_CERT", ""), "client certificate PEM `file`")
	fs.StringVar(&c.key, "key", env("FACEAGENT_SS_KEY", ""), "client key PEM `file`")
	fs.StringVar(&c.user, "user", env("FACEAGENT_SS_USER", ""), "MQTT user `name`")
	fs.StringVar(&c.passwordFile, "password-file", env("FACEAGENT_SS_PASSWORD_FILE", ""), "`file` holding the MQTT password")
	fs.StringVar(&c.clientID, "client-id", env("FACEAGENT_SS_CLIENT_ID", ""), "MQTT client `id`")
	fs.DurationVar(&c.timeout, "timeout", timeout, "per-request `timeout`")
	return fs, &c
}

// Run runs one sscli command line and returns the exit code.
func Run(ctx context.Context, args []string, io *IO) int {
	fs, conn := globalFlags(io)
	fs.Usage = func() {} // --help prints to stdout below; errors get a hint

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(io.Stdout)
			return exitOK
		}
		fmt.Fprintln(io.Stderr, "Run sscli --help for usage.")
		return exitError
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(io.Stderr)
		return exitError
	}
	if rest[0] == "help" {
		usage(io.Stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != rest[0] {
			continue
		}
		a := &app{IO: io, conn: *conn}
		err := c.run(ctx, a, rest[1:])
		return a.exitCode(c, err)
	}
	fmt.Fprintf(io.Stderr, "sscli: unknown command %q (sscli --help lists them)\n", rest[0])
	return exitError
}

func (a *app) exitCode(c command, err error) int {
	var ue usageError
	var ee errExit
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(a.Stdout, "Usage: sscli %s %s\n  %s\n", c.name, c.args, c.summary)
		var h helpRequest
		if errors.As(err, &h) && hasFlags(h.fs) {
			fmt.Fprintf(a.Stdout, "\nFlags:\n")
			h.fs.SetOutput(a.Stdout)
			h.fs.PrintDefaults()
		}
		fmt.Fprintf(a.Stdout, "\nConnection flags come before the command: sscli --help.\n")
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(a.Stderr, "sscli %s: %v\nUsage: sscli %s %s\n", c.name, err, c.name, c.args)
		return exitError
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrNotApplied):
		fmt.Fprintf(a.Stderr, "sscli %s: %v\n", c.name, err)
		return exitNotFound
	}
	fmt.Fprintf(a.Stderr, "sscli %s: %v\n", c.name, err)
	return exitError
}

// connect opens the store client the flags describe.
func (a *app) connect(ctx context.Context) (*store.Client, error) {
	id := a.conn.clientID
	if id == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id = "sscli-" + hex.EncodeToString(b[:])
	}
	o := &store.Options{URL: a.conn.url, ClientID: id, Username: a.conn.user, Timeout: a.conn.timeout}
	if a.conn.passwordFile != "" {
		pw, err := os.ReadFile(a.conn.passwordFile)
		if err != nil {
			return nil, err
		}
		o.Password = []byte(strings.TrimRight(string(pw), "\r\n"))
	}
	if a.conn.tlsCA != "" || a.conn.cert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.conn.tlsCA != "" {
			pem, err := os.ReadFile(a.conn.tlsCA)
			if err != nil {
				return nil, err
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificates", a.conn.tlsCA)
			}
		}
		if a.conn.cert != "" {
			kp, err := tls.LoadX509KeyPair(a.conn.cert, a.conn.key)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		o.TLS = cfg
	}
	cctx, cancel := context.WithTimeout(ctx, a.conn.timeout)
	defer cancel()
	return store.Connect(cctx, o)
}

// parseArgs parses flags placed anywhere among the positional arguments; everything after
// "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpRequest{fs}
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
