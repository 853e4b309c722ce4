package face_test

import (
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/device/face"
)

func ExampleParseAckJSON() {
	ack, err := face.ParseAckJSON([]byte(`{"messageId":"EditPerson-951-1","code":0,"message":""}`))
	fmt.Println(ack.MessageID, ack.OK(), err)

	_, err = face.ParseAckJSON([]byte(`{"messageId":"EditPerson-951-1"}`))
	var fe *face.Error
	fmt.Println(errors.As(err, &fe), fe.Field, errors.Is(err, face.ErrInvalid))
	fmt.Println(err)
	// Output:
	// EditPerson-951-1 true <nil>
	// true code true
	// face: ack: code: missing
}

func ExampleCommand_AppendJSON() {
	cmd := face.Command{MessageID: "EditPerson-951-1", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Li Lei"}}
	b, err := cmd.AppendJSON(nil)
	fmt.Println(string(b), err)
	cmd.Op = "Explode"
	_, err = cmd.AppendJSON(nil)
	fmt.Println(err)
	// Output:
	// {"messageId":"EditPerson-951-1","op":"AddPerson","person":{"id":"951","name":"Li Lei"}} <nil>
	// face: command: op: unknown op "Explode"
}
