package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
)

// A terminal that acks every command at once, and the result reported upstream.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox-example-")
	defer os.RemoveAll(dir)

	var ob *outbox.Outbox
	acked := make(chan string, 10)
	terminal := outbox.SenderFunc(func(ctx context.Context, deviceID string, cmd outbox.Command) error {
		fmt.Printf("send %s %s %s try %d\n", deviceID, cmd.Op, cmd.MessageID, cmd.Try)
		acked <- cmd.MessageID
		return nil
	})
	ob, err := outbox.Open(dir, terminal, nil)
	if err != nil {
		panic(err)
	}
	defer ob.Close()

	for i, person := range []string{"951", "952"} {
		err := ob.Enqueue(outbox.Task{
			MessageID: fmt.Sprintf("EditPerson-%s-%d", person, int64(1494527067538440192)+int64(i)),
			TaskID:    fmt.Sprintf("t-%d", i+1), DeviceID: "2042253", Op: "AddPerson",
			PersonID: person, Payload: []byte(`{"id":"` + person + `"}`),
		})
		if err != nil {
			panic(err)
		}
	}
	ob.Heartbeat("2042253") // the terminal is online: the first command goes out
	for range 2 {
		ob.Ack("2042253", <-acked, 0, "") // each ack sends the next at once
	}
	<-ob.ResultsReady()
	res, _ := ob.Results(10)
	for _, r := range res {
		fmt.Println(r.TaskID, r.Status, "tries", r.Tries)
	}
	// Output:
	// send 2042253 AddPerson EditPerson-951-1494527067538440192 try 1
	// send 2042253 AddPerson EditPerson-952-1494527067538440193 try 1
	// t-1 succeeded tries 1
	// t-2 succeeded tries 1
}
