package agent

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Only agent/broker (and the fork itself, third_party/) may import the MQTT broker
// library: the other parts reach the broker through agent/broker's own API, so the broker
// can change under them without their knowing. Tests are not held to it.
func TestOnlyTheBrokerImportsMochi(t *testing.T) {
	root := filepath.Join("..")
	allowed := []string{"agent/broker/", "third_party/"}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			for _, p := range allowed {
				if rel+"/" == p {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/mochi-mqtt/") {
				t.Errorf("%s imports %s: only agent/broker may (use its in-process API)", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: not walking the repository?", checked)
	}
}
