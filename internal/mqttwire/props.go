package mqttwire

// Properties [MQTT 2.2.2]: what the soak client (internal/soakclient) writes to look like
// the Azure IoT Operations Go SDK's session client on the wire (paho underneath, so again
// paho's bytes: props_test.go compares them), and a reader of the property blocks a
// broker sends.

// Property identifiers [MQTT 2.2.2.2].
const (
	PropPayloadFormat    = 0x01
	PropMessageExpiry    = 0x02
	PropContentType      = 0x03
	PropResponseTopic    = 0x08
	PropCorrelationData  = 0x09
	PropSubscriptionID   = 0x0B
	PropSessionExpiry    = 0x11
	PropAssignedClientID = 0x12
	PropServerKeepAlive  = 0x13
	PropAuthMethod       = 0x15
	PropAuthData         = 0x16
	PropRequestProblem   = 0x17
	PropWillDelay        = 0x18
	PropRequestResponse  = 0x19
	PropResponseInfo     = 0x1A
	PropServerReference  = 0x1C
	PropReasonString     = 0x1F
	PropReceiveMaximum   = 0x21
	PropTopicAliasMax    = 0x22
	PropTopicAlias       = 0x23
	PropMaximumQoS       = 0x24
	PropRetainAvailable  = 0x25
	PropUser             = 0x26
	PropMaximumPacket    = 0x27
	PropWildcardSubs     = 0x28
	PropSubIDAvailable   = 0x29
	PropSharedSubs       = 0x2A
)

// Subscription options [MQTT 3.8.3.1], or-ed with the QoS.
const (
	SubNoLocal           = 0x04
	SubRetainAsPublished = 0x08
)

// UserProperty is a name and value pair [MQTT 3.3.2.3.7]. Parsed ones alias the packet.
type UserProperty struct{ Key, Val []byte }

// Connect is a CONNECT with properties [MQTT 3.1], without will or credentials.
type Connect struct {
	ClientID   string
	CleanStart bool
	KeepAlive  uint16
	// SessionExpiry is written when not 0.
	SessionExpiry uint32
	// ReceiveMaximum is written when not 0.
	ReceiveMaximum uint16
	// RequestProblemInfo true is the protocol's default and not written; false writes
	// Request Problem Information 0 (paho's rule).
	RequestProblemInfo bool
	User               []UserProperty
}

// AppendConnectProps appends c with its properties in paho's order (Receive Maximum,
// Request Problem Information, Session Expiry Interval, user properties).
func AppendConnectProps(dst []byte, c *Connect) []byte {
	var pb [32]byte
	props := pb[:0]
	if c.ReceiveMaximum != 0 {
		props = append(props, PropReceiveMaximum, byte(c.ReceiveMaximum>>8), byte(c.ReceiveMaximum))
	}
	if !c.RequestProblemInfo {
		props = append(props, PropRequestProblem, 0)
	}
	if e := c.SessionExpiry; e != 0 {
		props = append(props, PropSessionExpiry, byte(e>>24), byte(e>>16), byte(e>>8), byte(e))
	}
	props = appendUser(props, c.User)
	var flags byte
	if c.CleanStart {
		flags = 0x02
	}
	body := 2 + 4 + 1 + 1 + 2 + vbiLen(len(props)) + len(props) + 2 + len(c.ClientID)
	dst = appendHeader(dst, TypeConnect<<4, body)
	dst = appendString(dst, "MQTT")
	dst = append(dst, 5, flags, byte(c.KeepAlive>>8), byte(c.KeepAlive))
	dst = append(appendVBI(dst, len(props)), props...)
	return appendString(dst, c.ClientID)
}

// AppendSubscribeOptions appends a SUBSCRIBE of one filter with the subscription options
// byte opts (QoS | SubNoLocal | ...) and no properties [MQTT 3.8].
func AppendSubscribeOptions(dst []byte, id uint16, filter string, opts byte) []byte {
	dst = appendHeader(dst, TypeSubscribe<<4|0x02, 2+1+2+len(filter)+1)
	dst = append(dst, byte(id>>8), byte(id), 0)
	return append(appendString(dst, filter), opts)
}

// PublishProps are the properties of a PUBLISH that the rig writes [MQTT 3.3.2.3].
type PublishProps struct {
	// PayloadFormat is written when WritePayloadFormat is set (paho writes it whenever
	// the field is not nil, as the SDK's session client always sets it).
	PayloadFormat      byte
	WritePayloadFormat bool
	// MessageExpiry, ContentType, ResponseTopic and CorrelationData are written when not
	// zero or empty.
	MessageExpiry   uint32
	ContentType     string
	ResponseTopic   string
	CorrelationData []byte
	User            []UserProperty
}

// AppendPublishProps appends a PUBLISH with properties p in paho's order; id is used only
// when qos > 0; dup sets the DUP flag of a resent message [MQTT 3.3.1.1].
func AppendPublishProps(dst []byte, topic string, qos byte, dup bool, id uint16, p *PublishProps, payload []byte) []byte {
	n := 0
	if p.WritePayloadFormat {
		n += 2
	}
	if p.MessageExpiry != 0 {
		n += 5
	}
	if p.ContentType != "" {
		n += 3 + len(p.ContentType)
	}
	if p.ResponseTopic != "" {
		n += 3 + len(p.ResponseTopic)
	}
	if len(p.CorrelationData) > 0 {
		n += 3 + len(p.CorrelationData)
	}
	for _, u := range p.User {
		n += 5 + len(u.Key) + len(u.Val)
	}
	body := 2 + len(topic) + vbiLen(n) + n + len(payload)
	if qos > 0 {
		body += 2
	}
	first := byte(TypePublish<<4) | qos<<1
	if dup {
		first |= 0x08
	}
	dst = appendHeader(dst, first, body)
	dst = appendString(dst, topic)
	if qos > 0 {
		dst = append(dst, byte(id>>8), byte(id))
	}
	dst = appendVBI(dst, n)
	if p.WritePayloadFormat {
		dst = append(dst, PropPayloadFormat, p.PayloadFormat)
	}
	if e := p.MessageExpiry; e != 0 {
		dst = append(dst, PropMessageExpiry, byte(e>>24), byte(e>>16), byte(e>>8), byte(e))
	}
	if p.ContentType != "" {
		dst = appendString(append(dst, PropContentType), p.ContentType)
	}
	if p.ResponseTopic != "" {
		dst = appendString(append(dst, PropResponseTopic), p.ResponseTopic)
	}
	if len(p.CorrelationData) > 0 {
		dst = appendBinary(append(dst, PropCorrelationData), p.CorrelationData)
	}
	dst = appendUser(dst, p.User)
	return append(dst, payload...)
}

// AppendDisconnectExpiry appends a DISCONNECT with reason 0 and the Session Expiry
// Interval property, which a client sends to end its session as it leaves [MQTT 3.14].
func AppendDisconnectExpiry(dst []byte, sessionExpiry uint32) []byte {
	e := sessionExpiry
	return append(dst, TypeDisconnect<<4, 7, 0, 5, PropSessionExpiry, byte(e>>24), byte(e>>16), byte(e>>8), byte(e))
}

func appendBinary(dst, b []byte) []byte {
	return append(append(dst, byte(len(b)>>8), byte(len(b))), b...)
}

func appendUser(dst []byte, user []UserProperty) []byte {
	for _, u := range user {
		dst = appendBinary(appendBinary(append(dst, PropUser), u.Key), u.Val)
	}
	return dst
}

// vbiLen is the length of n written as a variable byte integer.
func vbiLen(n int) int {
	l := 1
	for n >= 128 {
		n >>= 7
		l++
	}
	return l
}

// Properties holds a parsed property block. Byte fields alias the packet; Has records
// which identifiers were present (bit id-1; Present reads it).
type Properties struct {
	Has             uint64
	PayloadFormat   byte
	MessageExpiry   uint32
	SessionExpiry   uint32
	ReceiveMaximum  uint16
	ContentType     []byte
	ResponseTopic   []byte
	CorrelationData []byte
	ReasonString    []byte
	// User is appended to (reset first): pass the slice back to reuse it.
	User []UserProperty
}

// Present reports whether property id was in the block.
func (p *Properties) Present(id byte) bool { return id >= 1 && id <= 64 && p.Has&(1<<(id-1)) != 0 }

// UserValue returns the value of the first user property named key.
func (p *Properties) UserValue(key string) ([]byte, bool) {
	for _, u := range p.User {
		if string(u.Key) == key {
			return u.Val, true
		}
	}
	return nil, false
}

// propKind is how a property's value is encoded [MQTT 2.2.2.2]; 0 marks an unknown id.
var propKind = [0x2B]byte{
	PropPayloadFormat: 'b', PropMessageExpiry: '4', PropContentType: 's', PropResponseTopic: 's',
	PropCorrelationData: 's', PropSubscriptionID: 'v', PropSessionExpiry: '4', PropAssignedClientID: 's',
	PropServerKeepAlive: '2', PropAuthMethod: 's', PropAuthData: 's', PropRequestProblem: 'b',
	PropWillDelay: '4', PropRequestResponse: 'b', PropResponseInfo: 's', PropServerReference: 's',
	PropReasonString: 's', PropReceiveMaximum: '2', PropTopicAliasMax: '2', PropTopicAlias: '2',
	PropMaximumQoS: 'b', PropRetainAvailable: 'b', PropUser: 'p', PropMaximumPacket: '4',
	PropWildcardSubs: 'b', PropSubIDAvailable: 'b', PropSharedSubs: 'b',
}

// ParseProperties reads a property block (without its length: the props a Parse function
// returns) into p. An unknown identifier, a value running past the block, or a property
// other than User Property or Subscription Identifier given twice is ErrMalformed
// [MQTT 2.2.2.2].
func ParseProperties(b []byte, p *Properties) error {
	user := p.User[:0]
	*p = Properties{}
	defer func() { p.User = user }()
	for len(b) > 0 {
		id := b[0]
		if int(id) >= len(propKind) || propKind[id] == 0 {
			return ErrMalformed
		}
		if id != PropUser && id != PropSubscriptionID && p.Has&(1<<(id-1)) != 0 {
			return ErrMalformed
		}
		p.Has |= 1 << (id - 1)
		b = b[1:]
		var val []byte
		switch propKind[id] {
		case 'b', '2', '4':
			n := 1
			if propKind[id] == '2' {
				n = 2
			} else if propKind[id] == '4' {
				n = 4
			}
			if len(b) < n {
				return ErrMalformed
			}
			val, b = b[:n], b[n:]
		case 'v':
			i := 0
			for ; ; i++ {
				if i == len(b) || i == 4 {
					return ErrMalformed
				}
				if b[i]&0x80 == 0 {
					break
				}
			}
			b = b[i+1:]
			continue
		case 's':
			var err error
			if val, b, err = splitBinary(b); err != nil {
				return err
			}
		case 'p':
			k, rest, err := splitBinary(b)
			if err != nil {
				return err
			}
			v, rest, err := splitBinary(rest)
			if err != nil {
				return err
			}
			user = append(user, UserProperty{Key: k, Val: v})
			b = rest
			continue
		}
		switch id {
		case PropPayloadFormat:
			p.PayloadFormat = val[0]
		case PropMessageExpiry:
			p.MessageExpiry = be32(val)
		case PropSessionExpiry:
			p.SessionExpiry = be32(val)
		case PropReceiveMaximum:
			p.ReceiveMaximum = uint16(val[0])<<8 | uint16(val[1])
		case PropContentType:
			p.ContentType = val
		case PropResponseTopic:
			p.ResponseTopic = val
		case PropCorrelationData:
			p.CorrelationData = val
		case PropReasonString:
			p.ReasonString = val
		}
	}
	return nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// splitBinary splits a two-byte-length string or binary field from what follows.
func splitBinary(b []byte) (val, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, ErrMalformed
	}
	n := int(b[0])<<8 | int(b[1])
	if len(b) < 2+n {
		return nil, nil, ErrMalformed
	}
	return b[2 : 2+n], b[2+n:], nil
}

// Connack is a CONNACK read [MQTT 3.2.2]; Props aliases the packet.
type Connack struct {
	SessionPresent bool
	Code           byte
	Props          []byte
}

// ParseConnackProps splits a CONNACK's remaining part: flags, reason code, properties.
func ParseConnackProps(body []byte) (Connack, error) {
	if len(body) < 2 || body[0]&^1 != 0 {
		return Connack{}, ErrMalformed
	}
	c := Connack{SessionPresent: body[0]&1 == 1, Code: body[1]}
	if len(body) == 2 {
		return c, nil // no property length: none [MQTT 3.2.2.3]
	}
	props, rest, err := splitProperties(body[2:])
	if err != nil || len(rest) != 0 {
		return Connack{}, ErrMalformed
	}
	c.Props = props
	return c, nil
}
