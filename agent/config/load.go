package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
)

// MaxFileSize bounds a config file (and a board profile, and a remote override): real
// configs are a few KiB, and the parser holds the whole file in memory.
const MaxFileSize = 1 << 20

// Options adjusts how Load and Parse reach the outside world. The zero value (or nil)
// uses the process environment, the file system and the compiled-in board profiles.
type Options struct {
	// LookupEnv resolves *_env keys; default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// ReadFile reads *_file keys (passwords, tokens); default os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// Board returns the TOML profile (in this package's schema) of a board name; default:
	// the boards package's profile (see board.go).
	Board func(name string) ([]byte, error)
	// BoardSerialPorts returns a board's default serial ports, in the order serial devices
	// without a port take them. Default: the boards package's Profile.SerialPorts when Board
	// is left nil too; none when only Board is set (a custom board source has no ports
	// unless it says so).
	BoardSerialPorts func(name string) ([]string, error)
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.LookupEnv == nil {
		out.LookupEnv = os.LookupEnv
	}
	if out.ReadFile == nil {
		out.ReadFile = os.ReadFile
	}
	if out.Board == nil {
		out.Board = boardProfile
		if out.BoardSerialPorts == nil {
			out.BoardSerialPorts = boardSerialPorts
		}
	}
	return out
}

// Load reads, decodes and validates the config file at path. Problems come back as
// Errors (every one found, in line order), each printing as "FILE:LINE: key: what".
func Load(path string, opts *Options) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error(), Err: err}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error(), Err: err}}
	}
	return Parse(path, data, opts)
}

// Parse decodes and validates config text; name is used in error messages (the file name).
func Parse(name string, data []byte, opts *Options) (*Config, error) {
	o := opts.withDefaults()
	if len(data) > MaxFileSize {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize), Err: ErrTooLarge}}
	}
	src := string(data)
	d := decoder{file: name, ix: indexLines(src)}

	// First pass into a map: which optional sections the file names, and its board.
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		return nil, Errors{d.decodeError(err, src)}
	}
	cfg := Default()
	cfg.File = name
	cfg.Broker, cfg.Upstream, cfg.Intake.HTTP = DefaultBroker(), DefaultUpstream(), DefaultIntakeHTTP()

	board := boardName(raw)
	var boardPorts []string
	if board != "" {
		if err := d.applyBoard(cfg, board, o.Board); err != nil {
			return nil, Errors{err}
		}
		if o.BoardSerialPorts != nil {
			var err error
			if boardPorts, err = o.BoardSerialPorts(board); err != nil {
				return nil, Errors{{File: name, Line: d.ix.line("agent.board"), Key: "agent.board", Msg: err.Error(), Err: err}}
			}
		}
	}

	if devs, ok := raw["devices"].([]map[string]any); ok {
		cfg.Devices = make([]Device, len(devs))
		for i := range cfg.Devices {
			cfg.Devices[i] = DefaultDevice()
		}
	}
	md, err := toml.Decode(src, cfg)
	if err != nil {
		return nil, Errors{d.decodeError(err, src)}
	}
	if errs := d.unknownKeys(md); len(errs) > 0 {
		return nil, errs.sorted()
	}
	// Optional sections the file leaves out stay off.
	if _, ok := raw["broker"]; !ok {
		cfg.Broker = nil
	}
	if _, ok := raw["upstream"]; !ok {
		cfg.Upstream = nil
	}
	if in, _ := raw["intake"].(map[string]any); in == nil || in["http"] == nil {
		cfg.Intake.HTTP = nil
	}

	d.assignBoardPorts(cfg, board, boardPorts)
	d.resolveSecrets(cfg, o)
	d.validate(cfg)
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	if b := cfg.Broker; b != nil {
		anon := b.Anonymous() // print the effective value, not "unset"
		b.AllowAnonymous = &anon
	}
	return cfg, nil
}

func boardName(raw map[string]any) string {
	agent, _ := raw["agent"].(map[string]any)
	name, _ := agent["board"].(string)
	return name
}

// decoder carries what error reporting needs across the steps of Parse.
type decoder struct {
	file string
	ix   *lineIndex
	errs Errors
}

// errf records a problem with an indexed key ("devices[1].baud").
func (d *decoder) errf(key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: d.ix.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) applyBoard(cfg *Config, name string, lookup func(string) ([]byte, error)) *Error {
	profile, err := lookup(name)
	if err != nil {
		return &Error{File: d.file, Line: d.ix.line("agent.board"), Key: "agent.board", Msg: err.Error(), Err: err}
	}
	bd := decoder{file: "board " + strconv.Quote(name), ix: indexLines(string(profile))}
	var raw map[string]any
	if _, err := toml.Decode(string(profile), &raw); err != nil {
		return bd.decodeError(err, string(profile))
	}
	// A profile describes hardware: it may tune sections, never add devices or endpoints.
	for _, k := range []string{"devices", "upstream"} {
		if _, ok := raw[k]; ok {
			return &Error{File: bd.file, Line: bd.ix.line(k), Key: k, Msg: "not allowed in a board profile"}
		}
	}
	md, err := toml.Decode(string(profile), cfg)
	if err != nil {
		return bd.decodeError(err, string(profile))
	}
	if errs := bd.unknownKeys(md); len(errs) > 0 {
		return errs.sorted()[0]
	}
	return nil
}

// splitLineError takes apart an error text of the form
// `toml: line N (last key "KEY"): MESSAGE`, where N is ASCII digits, KEY holds no '"' and
// MESSAGE no newline; ok is false for any other text. Config, metrics and boards match by hand,
// not with regexps: the regexp matchers cost the armv7 binary about 64 KB (docs/benchmarks.md).
func splitLineError(s string) (line, key, msg string, ok bool) {
	rest, ok := strings.CutPrefix(s, "toml: line ")
	if !ok {
		return "", "", "", false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return "", "", "", false
	}
	line, rest = rest[:n], rest[n:]
	if rest, ok = strings.CutPrefix(rest, ` (last key "`); !ok {
		return "", "", "", false
	}
	key, rest, ok = strings.Cut(rest, `"`)
	if !ok {
		return "", "", "", false
	}
	if msg, ok = strings.CutPrefix(rest, "): "); !ok || strings.Contains(msg, "\n") {
		return "", "", "", false
	}
	return line, key, msg, true
}

// firstQuoted returns what lies between the first two '"' in s, and whether s has two.
func firstQuoted(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, `"`)
	if !ok {
		return "", false
	}
	inner, _, ok := strings.Cut(rest, `"`)
	return inner, ok
}

// decodeError turns a BurntSushi/toml error into an *Error with the line.
func (d *decoder) decodeError(err error, src string) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line := pe.Position.Line
		key := pe.LastKey
		// For keys under an array of tables toml reports the last element's position;
		// pick the element whose line holds the offending value instead.
		if key != "" {
			if l, ix := d.lineOfValue(key, pe.Message, src); l > 0 {
				line, key = l, ix
			}
		}
		return &Error{File: d.file, Line: line, Key: key, Msg: pe.Message, Err: err}
	}
	if l, key, msg, ok := splitLineError(err.Error()); ok {
		line, _ := strconv.Atoi(l)
		return &Error{File: d.file, Line: line, Key: key, Msg: strings.TrimPrefix(msg, "toml: "), Err: err}
	}
	return &Error{File: d.file, Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: err}
}

func (d *decoder) lineOfValue(plain, msg, src string) (int, string) {
	lines := strings.Split(src, "\n")
	want, _ := firstQuoted(msg)
	if want == "" {
		return 0, ""
	}
	for _, e := range d.ix.entries {
		if e.plain == plain && e.line <= len(lines) && strings.Contains(lines[e.line-1], want) {
			return e.line, e.indexed
		}
	}
	return 0, ""
}

// unknownKeys reports keys that are not part of the schema, matched exactly (the toml
// package itself matches field names case-insensitively, which would let "Max_Tries"
// through).
func (d *decoder) unknownKeys(md toml.MetaData) Errors {
	schema := schemaKeys()
	var errs Errors
	seen := map[string]int{}
	reported := map[string]bool{}
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[strings.Join(k, ".")] = true
	}
	for _, k := range md.Keys() {
		plain := strings.Join(k, ".")
		n := seen[plain]
		seen[plain] = n + 1
		if schema[plain] && !undecoded[plain] {
			continue
		}
		if parent := strings.Join(k[:len(k)-1], "."); parent != "" && reported[parent] {
			reported[plain] = true // inside a table already reported
			continue
		}
		reported[plain] = true
		name, line := plain, d.ix.nth(plain, n)
		for _, e := range d.ix.entries {
			if e.plain == plain && e.line == line {
				name = e.indexed
				break
			}
		}
		msg := "unknown key"
		if hint := suggest(plain, schema); hint != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", hint)
		}
		errs = append(errs, &Error{File: d.file, Line: line, Key: name, Msg: msg})
	}
	return errs
}

// suggest finds the schema key an unknown key was probably meant to be: one that differs
// only in case, '-' versus '_', a left-out '_', or by at most two typos in its last part.
func suggest(k string, schema map[string]bool) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	parent, last := "", k
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		parent, last = k[:i], k[i+1:]
	}
	best, bestDist := "", 3
	for s := range schema {
		if norm(s) == norm(k) {
			return s
		}
		sp, sl := "", s
		if i := strings.LastIndexByte(s, '.'); i >= 0 {
			sp, sl = s[:i], s[i+1:]
		}
		if sp != parent {
			continue
		}
		if dist := editDistance(last, sl); dist < bestDist || dist == bestDist && s < best {
			best, bestDist = s, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var schemaOnce = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	walkSchema(reflect.TypeFor[Config](), "", func(key string, _ reflect.Type) { out[key] = true })
	return out
})

func schemaKeys() map[string]bool { return schemaOnce() }

var textUnmarshaler = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()

// walkSchema calls fn for every key of the schema rooted at t: tables and leaves, with
// arrays of tables written without an index ("devices.id").
func walkSchema(t reflect.Type, prefix string, fn func(key string, leaf reflect.Type)) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		key := join(prefix, name)
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler) {
			fn(key, nil)
			walkSchema(ft, key, fn)
			continue
		}
		fn(key, f.Type)
	}
}

// SchemaKeys lists every key of the schema, tables included, in declaration order; arrays
// of tables carry no index ("devices.id"). configs/agent.toml is tested against it.
func SchemaKeys() []string {
	var out []string
	walkSchema(reflect.TypeFor[Config](), "", func(key string, _ reflect.Type) { out = append(out, key) })
	return out
}

// resolveSecrets reads passwords and tokens from their files or environment variables.
func (d *decoder) resolveSecrets(cfg *Config, o Options) {
	if u := cfg.Upstream; u != nil {
		u.Password = d.secret("upstream.password_file", u.PasswordFile, "upstream.password_env", u.PasswordEnv, o)
	}
	if h := cfg.Intake.HTTP; h != nil {
		h.AuthValue = d.secret("intake.http.auth_value_file", h.AuthValueFile, "intake.http.auth_value_env", h.AuthValueEnv, o)
	}
	if cfg.UI.Listen != "" { // validateUI refuses a token file for a page that is off
		cfg.UI.Token = d.secret("ui.token_file", cfg.UI.TokenFile, "", "", o)
	}
}

func (d *decoder) secret(fileKey, file, envKey, env string, o Options) string {
	switch {
	case file != "" && env != "":
		d.errf(envKey, "set either %s or %s, not both", fileKey, envKey)
	case file != "":
		b, err := o.ReadFile(file)
		if err != nil {
			d.errf(fileKey, "%v", err)
			return ""
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			d.errf(fileKey, "%s is empty", file)
		}
		return s
	case env != "":
		s, ok := o.LookupEnv(env)
		if !ok || s == "" {
			d.errf(envKey, "environment variable %s is not set", env)
		}
		return s
	}
	return ""
}

// WriteTOML writes the effective configuration (defaults, board and file merged) as TOML.
// Secrets resolved from files or the environment are not written.
func (c *Config) WriteTOML(w io.Writer) error {
	out := *c
	out.Devices = nil
	for _, d := range c.Devices {
		if d.Transport != TransportSerial {
			// Serial settings of an MQTT terminal are meaningless (and refused if written).
			d.Port, d.Baud, d.DataBits, d.Parity, d.StopBits = "", 0, 0, "", 0
		}
		out.Devices = append(out.Devices, d)
	}
	enc := toml.NewEncoder(w)
	enc.Indent = ""
	return enc.Encode(&out)
}
