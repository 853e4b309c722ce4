// Command atomicalign reports 64-bit sync/atomic operations on struct fields that are not
// 64-bit aligned on the package's target. On 32-bit ARM (the gateways' armv6 and armv7) such
// an operation panics at run time ("unaligned 64-bit atomic operation"), and a field that
// happened to be aligned moves when a field is added before it; the host's amd64 build never
// shows it. `make vet-arm` runs it for linux/arm:
//
//	go build -o bin/atomicalign ./internal/atomicalign
//	GOOS=linux GOARCH=arm GOARM=7 bin/atomicalign ./... github.com/mochi-mqtt/server/v2/...
//
// It is golang.org/x/tools' atomicalign analyzer, which go vet does not run.
package main

import (
	"golang.org/x/tools/go/analysis/passes/atomicalign"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(atomicalign.Analyzer) }
