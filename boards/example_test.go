package boards_test

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/boards"
)

func ExampleLookup() {
	p, err := boards.Lookup("rpi0-armv6")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Target(), p.QEMUCPU)
	fmt.Println(p.GOMEMLIMITText, p.GOMEMLIMIT)
	fmt.Println(p.JournalSync, p.JournalBatchWindow)
	fmt.Println(p.SerialPorts, p.DataDir)

	_, err = boards.Lookup("rpi9")
	fmt.Println(errors.Is(err, boards.ErrUnknownBoard))
	// Output:
	// linux/arm/6 arm1176
	// 128MiB 134217728
	// batch 20ms
	// [/dev/serial0 /dev/ttyUSB0] /var/lib/faceagent
	// true
}

func ExampleNames() {
	fmt.Println(boards.Names())
	// Output: [imx6ull-armv7 rk356x-arm64 rpi0-armv6 rpi3-armv7 rpi4-arm64]
}
