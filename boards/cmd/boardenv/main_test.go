package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestListAndEnv(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "rpi0-armv6 linux arm 6\n") || !strings.Contains(out.String(), "rpi4-arm64 linux arm64 -\n") {
		t.Fatalf("list:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"rpi3-armv7"}, &out, &errb); code != 0 || out.String() != "CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7\n" {
		t.Fatalf("exit %d, env %q", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown board") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"a", "b"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d for two arguments", code)
	}
}
