// Command boardenv prints the embedded board profiles for the Makefile, so that the build reads
// boards/*.toml through the same strict parser the agent uses.
//
//	boardenv            one line per board: NAME GOOS GOARCH GOARM ("-" when none)
//	boardenv NAME       the build environment for one board: CGO_ENABLED=0 GOOS=… GOARCH=… [GOARM=…]
//
// Exit status 2 on an unknown board or a profile that fails to parse.
package main
