package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/seed0e69bba5/faceagent/boards"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		all, err := boards.All()
		if err != nil {
			fmt.Fprintln(stderr, "boardenv:", err)
			return 2
		}
		for _, p := range all {
			arm := p.GOARM
			if arm == "" {
				arm = "-"
			}
			fmt.Fprintln(stdout, p.Name, p.GOOS, p.GOARCH, arm)
		}
		return 0
	case 1:
		p, err := boards.Lookup(args[0])
		if err != nil {
			fmt.Fprintln(stderr, "boardenv:", err)
			return 2
		}
		fmt.Fprintln(stdout, strings.Join(p.Environ(), " "))
		return 0
	default:
		fmt.Fprintln(stderr, "usage: boardenv [NAME]")
		return 2
	}
}
