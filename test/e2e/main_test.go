package e2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(deadLetterChildEnv); dir != "" {
		deadLetterChild(dir) // a crash test's child: it runs until SIGKILL
		return
	}
	if dir := os.Getenv(whitelistChildEnv); dir != "" {
		whitelistChild(dir) // tasks into an agent, until SIGKILL
		return
	}
	if path := os.Getenv(syncKillChildEnv); path != "" {
		syncKillChild(path) // an agent repairing whitelists, until SIGKILL
		return
	}
	if dir := os.Getenv(healthChildEnv); dir != "" {
		healthChild(dir) // an agent short of file descriptors, until SIGKILL
		return
	}
	goleak.VerifyTestMain(m)
}
