package hlc_test

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/hlc"
)

func ExampleParseString() {
	// The protocol document writes timestamps unpadded, the SDKs padded; both parse.
	for _, s := range []string{"1696374425000:1:StateStore", "001696374425000:00001:StateStore", "1696374425000:1:"} {
		ts, err := hlc.ParseString(s)
		if err != nil {
			fmt.Println("error:", err, "| empty node:", errors.Is(err, hlc.ErrEmptyNode))
			continue
		}
		fmt.Println(ts.Wall, ts.Counter, ts.Node)
	}
	// Output:
	// 1696374425000 1 StateStore
	// 1696374425000 1 StateStore
	// error: hlc: empty node id (node id) in "1696374425000:1:" | empty node: true
}

func ExampleTimestamp_AppendText() {
	ts := hlc.Timestamp{Wall: 1696374425000, Counter: 1, Node: "StateStore"}
	buf := make([]byte, 0, 64) // reused across messages: no allocation
	buf = ts.AppendText(buf[:0])
	fmt.Printf("%s\n", buf)
	// Output: 001696374425000:00001:StateStore
}

func ExampleCompare() {
	a, _ := hlc.ParseString("1696374425000:1:CLIENT")
	b, _ := hlc.ParseString("001696374425000:00001:StateStore")
	c, _ := hlc.ParseString("1696374425001:0:CLIENT")
	fmt.Println(hlc.Compare(a, b), hlc.Compare(b, c), hlc.Compare(c, c))
	// Output: -1 -1 0
}

// The state store stamps each SET with Update: the version is greater than the request's __ts
// and than every version it issued before.
func ExampleClock_Update() {
	physical := int64(1696374425000) // a fixed physical clock, for the example
	store := hlc.NewClock("StateStore", hlc.WithWallClock(func() int64 { return physical }))

	req, _ := hlc.ParseString("1696374425000:0:CLIENT")
	version, err := store.Update(req)
	fmt.Println(version, err)

	// A client clock more than a minute ahead is refused; the store's clock is unchanged.
	future := hlc.Timestamp{Wall: physical + 61_000, Node: "CLIENT"}
	_, err = store.Update(future)
	fmt.Println(errors.Is(err, hlc.ErrTooFarAhead), store.Last())
	// Output:
	// 001696374425000:00001:StateStore <nil>
	// true 001696374425000:00001:StateStore
}

// A client stamps requests with Now and merges the store's answers with Observe, so its next
// request is ordered after what the store told it.
func ExampleClock_Observe() {
	physical := int64(1696374425000)
	client := hlc.NewClock("CLIENT", hlc.WithWallClock(func() int64 { return physical }))

	fmt.Println(client.Now()) // __ts of a SET
	resp, _ := hlc.ParseString("001696374425004:00002:StateStore")
	client.Observe(resp)      // __ts of the response: the store's clock is 4 ms ahead
	fmt.Println(client.Now()) // __ts of the next request
	// Output:
	// 001696374425000:00000:CLIENT
	// 001696374425004:00003:CLIENT
}
