package sswire

// Topics of the state store service (protocol document, "State store system
// topic").
const (
	// InvokeTopic is where clients publish requests.
	InvokeTopic = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
	// NotifyTopicPrefix starts every notification topic (no trailing '/').
	NotifyTopicPrefix = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8"
)

const upperHex = "0123456789ABCDEF"

// AppendUpperHex appends b in upper-case base 16.
func AppendUpperHex(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, upperHex[c>>4], upperHex[c&0x0f])
	}
	return dst
}

// AppendNotifyTopic appends the topic of the notifications for key sent to
// clientID, NotifyTopicPrefix/{HEX(clientId)}/command/notify/{HEX(key)},
// both in upper-case base 16 (docs/design.md, wire fact 3: 8 levels). With an empty key it
// appends the client's prefix of its notification topics, ending in '/'.
func AppendNotifyTopic(dst, clientID, key []byte) []byte {
	dst = append(dst, NotifyTopicPrefix+"/"...)
	dst = AppendUpperHex(dst, clientID)
	dst = append(dst, "/command/notify/"...)
	return AppendUpperHex(dst, key)
}
