package mqtt

import "github.com/mochi-mqtt/server/v2/packets"

// RefuseConnect sets the reason code of the CONNACK that refuses cl when an
// OnConnectAuthenticate hook returns false; without it the refusal is 0x86 (Bad User Name or
// Password). Call it from that hook, before returning false. code must be a CONNACK error
// (0x80 or more); for an MQTT 3.1.1 client SendConnack maps it to a 3.1.1 return code where
// V5CodesToV3 has one (0x85 Client Identifier not valid: 0x02 Identifier rejected), so pick a
// code with a mapping for such clients.
//
// faceagent patch (refusal code): mochi answered every refusal of OnConnectAuthenticate with
// 0x86, and no hook runs after authentication that can refuse with another code before the
// session is taken over (OnSessionEstablish cannot refuse). agent/broker refuses a client id
// held by another user with 0x85, and a certificate that does not belong to the user with
// 0x87, after the password check, so that neither can be probed without credentials.
func (cl *Client) RefuseConnect(code packets.Code) {
	if code.Code >= packets.ErrUnspecifiedError.Code {
		cl.State.connectRefusal = code
	}
}

// refusalCode is the CONNACK reason refusing cl after OnConnectAuthenticate.
func (cl *Client) refusalCode() packets.Code {
	if cl.State.connectRefusal.Code != 0 {
		return cl.State.connectRefusal
	}
	return packets.ErrBadUsernameOrPassword
}
