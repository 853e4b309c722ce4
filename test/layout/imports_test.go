package layout

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/seed0e69bba5/faceagent"

// rule forbids the packages matching from (non-test files) to import those matching to,
// unless the importer matches one of except.
type rule struct {
	from, to string   // path patterns relative to the module ("…/..." matches a subtree); to may be a full import path
	except   []string // importers allowed all the same
	why      string
}

var rules = []rule{
	{from: "...", to: "github.com/mochi-mqtt/server/v2/...", except: []string{"agent/broker/..."},
		why: "only agent/broker knows the MQTT server library; the others use what it offers (topic interception, publishing, the terminals' bus), so the fork can change without touching them"},
	{from: "...", to: "agent", except: []string{"agent/cmd/...", "tools/...", "test/..."},
		why: "the root package is the wiring of the daemon: nothing but its command, the tools and the suites may depend on it"},

	// Data packages: formats and algorithms without I/O, usable by the tools and the fuzzers.
	{from: "resp3", to: "std:os", why: "resp3 is a data package: no I/O"},
	{from: "resp3", to: "std:net", why: "resp3 is a data package: no I/O"},
	{from: "hlc", to: "std:os", why: "hlc is a data package: no I/O"},
	{from: "hlc", to: "std:net", why: "hlc is a data package: no I/O"},
	{from: "device/face", to: "std:os", why: "device/face (terminal protocol v1 and v2 formats) is a data package: no I/O"},
	{from: "device/face", to: "std:net", why: "device/face is a data package: no I/O"},
	{from: "agent/wire", to: "std:os", why: "agent/wire (the upstream formats) is a data package: no I/O"},
	{from: "agent/wire", to: "std:net", why: "agent/wire is a data package: no I/O"},
	{from: "agent/wire", to: "agent/...", why: "agent/wire is a leaf: the parts depend on it, not it on them"},
	{from: "agent/publish", to: "...", why: "agent/publish is the contract between reports and their carrier: standard library only"},

	// Leaves of the agent: the journal, the outbox, the config, the store client and the
	// broker know nothing of the parts that use them.
	{from: "agent/journal", to: "agent/...", why: "the journal is a leaf used by the outbox, the backlog and the broker"},
	{from: "agent/outbox", to: "agent/...", why: "the outbox depends on the journal (and the terminal protocol's data types) only"},
	{from: "agent/config", to: "agent/...", why: "the config is parsed before anything starts and depends on nothing of the agent"},
	{from: "agent/store", to: "agent/...", why: "the state store client is usable on its own (tools/sscli)"},
	{from: "agent/broker/...", to: "agent/...", why: "the broker and its state store are usable on their own (a broker-only faceagent)"},
	{from: "device/...", to: "agent/...", why: "the terminal links are used by the agent, not the other way round"},
	{from: "resp3", to: "...", why: "resp3 depends on nothing of the module"},
	{from: "hlc", to: "...", why: "hlc depends on nothing of the module"},

	// The parts of the agent: one concern each; siblings do not import each other (the root
	// connects them through small interfaces declared where they are used).
	{from: "agent/intake", to: "agent/...", why: "intake takes tasks in; what it needs of the others is an interface of its own"},
	{from: "agent/links", to: "agent/...", why: "links route commands to terminals; what they need of the others is an interface of their own"},
	{from: "agent/backlog", to: "agent/...", why: "the backlog is a journalled queue and the loop that drains it through the publish contract, nothing more"},
	{from: "agent/report", to: "agent/...", why: "reports build on the backlog and publish through the publish contract"},
	{from: "agent/upstream", to: "agent/...", why: "the upstream connection carries what the others give it"},
	{from: "agent/devstate", to: "agent/...", why: "terminal state reaches the store through one small key-value interface"},
	{from: "agent/remote", to: "agent/...", why: "remote control reaches the store through one small key-value interface"},
	{from: "agent/whitelist", to: "agent/...", why: "the desired whitelists are a store of their own; what they need of the others is an interface of their own"},
	{from: "agent/kv", to: "agent/...", why: "the key-value interface adapts the store client and the embedded engine"},
	{from: "agent/ui", to: "agent/...", why: "the operator's page shows the State the root builds and acts through the functions it is given; what it needs of the others is an interface of its own"},
	{from: "agent/faces", to: "agent/...", why: "the face store keeps faces by their hash; who refers to them (the desired lists) reaches it as a predicate from the root"},
}

// allowed lists, per importer, the module packages a rule above would forbid but that
// its concern needs. agent/metrics (the registry's types) and the leaf data packages are
// what the parts share; nothing else.
var allowed = map[string][]string{
	"agent/outbox":    {"agent/journal"},
	"agent/store":     {},
	"agent/broker":    {"agent/journal", "agent/broker/statestore"},
	"agent/intake":    {"agent/wire", "agent/outbox", "agent/metrics"},
	"agent/links":     {"agent/outbox", "agent/metrics"},
	"agent/backlog":   {"agent/journal", "agent/publish", "agent/metrics"},
	"agent/report":    {"agent/backlog", "agent/journal", "agent/wire", "agent/publish", "agent/outbox", "agent/metrics"},
	"agent/upstream":  {"agent/publish", "agent/metrics"},
	"agent/devstate":  {"agent/kv", "agent/wire", "agent/outbox", "agent/metrics", "agent/store"},
	"agent/remote":    {"agent/kv", "agent/outbox", "agent/wire", "agent/metrics"},
	"agent/kv":        {"agent/store", "agent/broker/statestore"},
	"agent/wire":      {},
	"agent/whitelist": {"agent/journal", "agent/metrics", "agent/wire"},
	"agent/ui":        {"agent/metrics"},
	"agent/faces":     {"agent/metrics"},
}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := modulePackages(t, root)
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages under %s: is the module root right?", len(pkgs), root)
	}
	checked := 0
	for pkg, imports := range pkgs {
		for _, imp := range imports {
			for _, r := range rules {
				if !match(r.from, pkg) || !match(r.to, relative(imp)) || anyMatch(r.except, pkg) {
					continue
				}
				if pkg == relative(imp) || isAllowed(pkg, relative(imp)) {
					continue
				}
				t.Errorf("%s imports %s: %s", pkg, imp, r.why)
			}
			checked++
		}
	}
	t.Logf("%d packages, %d imports checked against %d rules", len(pkgs), checked, len(rules))
}

// TestRulesCatchABreach: the matcher finds what the rules are about (a test of the test).
func TestRulesCatchABreach(t *testing.T) {
	cases := []struct {
		pkg, imp string
		broken   bool
	}{
		{"agent/links", module + "/agent/report", true},
		{"agent/report", module + "/agent/backlog", false},
		{"device/mqttlink", "github.com/mochi-mqtt/server/v2", true},
		{"agent/broker", "github.com/mochi-mqtt/server/v2/packets", false},
		{"agent/wire", "os", true},
		{"agent/wire", "strconv", false},
		{"agent/publish", "context", false},
		{"agent/publish", module + "/agent/wire", true},
		{"agent/outbox", module + "/agent/journal", false},
		{"agent/journal", module + "/agent/outbox", true},
		{"tools/taskctl", module + "/agent", false},
		{"agent/report", module + "/agent", true},
		{"agent/ui", module + "/agent/outbox", true},
		{"agent/ui", module + "/agent/metrics", false},
		{"agent/faces", module + "/agent/whitelist", true},
		{"agent/faces", module + "/agent/metrics", false},
	}
	for _, c := range cases {
		broken := false
		for _, r := range rules {
			if match(r.from, c.pkg) && match(r.to, relative(c.imp)) && !anyMatch(r.except, c.pkg) &&
				c.pkg != relative(c.imp) && !isAllowed(c.pkg, relative(c.imp)) {
				broken = true
			}
		}
		if broken != c.broken {
			t.Errorf("%s importing %s: broken = %v, want %v", c.pkg, c.imp, broken, c.broken)
		}
	}
}

// modulePackages returns each package of the module (path relative to the module, third
// party forks and testdata excluded) with the imports of its non-test files.
func modulePackages(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "third_party" || name == "node_modules") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		pkgs[filepath.ToSlash(rel)] = bp.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// relative is imp relative to the module ("agent/wire"), "std:" and imp for the standard
// library ("std:os"), or imp itself for other modules.
func relative(imp string) string {
	if r, ok := strings.CutPrefix(imp, module+"/"); ok {
		return r
	}
	if first, _, _ := strings.Cut(imp, "/"); !strings.Contains(first, ".") {
		return "std:" + imp
	}
	return imp
}

// match reports whether path matches pattern: "..." is every package of the module,
// "x/..." is x and its subtree, else the path itself.
func match(pattern, path string) bool {
	switch {
	case pattern == "...":
		return !strings.HasPrefix(path, "std:") && !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
	case strings.HasSuffix(pattern, "/..."):
		p := strings.TrimSuffix(pattern, "/...")
		return path == p || strings.HasPrefix(path, p+"/")
	}
	return path == pattern
}

func anyMatch(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, path) })
}

// isAllowed reports whether allowed lets pkg (or the nearest listed ancestor) import imp.
func isAllowed(pkg, imp string) bool {
	for p := pkg; ; {
		if list, ok := allowed[p]; ok {
			return slices.ContainsFunc(list, func(a string) bool { return match(a, imp) || strings.HasPrefix(imp, a+"/") })
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}
