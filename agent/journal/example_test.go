package journal_test

import (
	"fmt"
	"os"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

func Example() {
	dir, _ := os.MkdirTemp("", "journal-example-")
	defer os.RemoveAll(dir)

	j, err := journal.Open(dir, nil)
	if err != nil {
		panic(err)
	}
	for _, rec := range []string{"add 951", "add 952", "delete 951"} {
		if err := j.Append([]byte(rec)); err != nil { // durable when it returns
			panic(err)
		}
	}
	j.Close()

	j, err = journal.Open(dir, nil) // recovers: a torn tail would be cut here
	if err != nil {
		panic(err)
	}
	defer j.Close()
	j.Replay(func(rec []byte) error {
		fmt.Println(string(rec))
		return nil
	})
	fmt.Println("records:", j.Recovery().Records)
	// Output:
	// add 951
	// add 952
	// delete 951
	// records: 3
}
