//go:build !linux

package journal

import (
	"testing"
	"time"
)

// Elsewhere there are no per-thread scheduler statistics: the benchmark reports wall
// times only.
type schedStats struct{}

func newSchedStats(*testing.B) *schedStats                 { return &schedStats{} }
func (*schedStats) read(int) (onCPU, waited time.Duration) { return 0, 0 }
func (*schedStats) available() bool                        { return false }
func gettid() int                                          { return 0 }
