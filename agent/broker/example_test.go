package broker_test

import (
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// Start the embedded broker on a free loopback port. MQTT clients connect to
// b.Addr() and publish state store requests on broker.InvokeTopic; in-process
// code can also reach the engine directly.
func ExampleNew() {
	b, err := broker.New(&broker.Options{
		Listen:         "127.0.0.1:0",
		AllowAnonymous: true,
		MaxKeys:        10000,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(); err != nil { // listening when it returns
		log.Fatal(err)
	}
	defer b.Close()

	_, port, _ := net.SplitHostPort(b.Addr())
	n, _ := strconv.Atoi(port)
	fmt.Println("listening:", n > 0)

	reply, _ := b.Store().Do(&statestore.Request{
		Payload:      []byte("*3\r\n$3\r\nSET\r\n$6\r\nSETKEY\r\n$5\r\nVALUE\r\n"),
		Timestamp:    hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "example"}.String(),
		HasTimestamp: true,
	}, nil)
	fmt.Printf("%q\n", reply)
	// Output:
	// listening: true
	// "+OK\r\n"
}
