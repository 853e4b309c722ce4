package mqtt

import "github.com/mochi-mqtt/server/v2/packets"

// ConnectAuthenticator is implemented by an authentication hook that chooses the reason
// code of the CONNACK refusing a client. The server asks a hook implementing it in place of
// its OnConnectAuthenticate (whether or not the hook provides that): packets.CodeSuccess
// lets the client in, as OnConnectAuthenticate returning true; a CONNACK error (0x80 or
// more) refuses it with that code, which SendConnack maps to a 3.1.1 return code for an
// MQTT 3.1.1 client where V5CodesToV3 has one (0x85 Client Identifier not valid: 0x02
// Identifier rejected), so pick a code with a mapping for such clients; any other code
// refuses it with 0x86 (Bad User Name or Password), as OnConnectAuthenticate returning
// false. As before, a client is let in when any hook lets it in; a refused client gets the
// first code a hook chose.
//
// faceagent patch (refusal code): mochi answered every refusal of OnConnectAuthenticate with
// 0x86, and no hook runs after authentication that can refuse with another code before the
// session is taken over (OnSessionEstablish cannot refuse). agent/broker refuses a client id
// held by another user with 0x85, and a certificate that does not belong to the user with
// 0x87, after the password check, so that neither can be probed without credentials.
type ConnectAuthenticator interface {
	AuthenticateConnect(cl *Client, pk packets.Packet) packets.Code
}

// authenticateConnect is OnConnectAuthenticate with the hooks' reason codes: it returns
// packets.CodeSuccess when a hook lets cl in, else the CONNACK reason refusing it.
// faceagent patch (refusal code).
func (h *Hooks) authenticateConnect(cl *Client, pk packets.Packet) packets.Code {
	refusal := packets.ErrBadUsernameOrPassword // [MQTT-3.1.4-2]
	chosen := false
	for _, hook := range h.GetAll() {
		if a, ok := hook.(ConnectAuthenticator); ok {
			code := a.AuthenticateConnect(cl, pk)
			if code.Code == packets.CodeSuccess.Code {
				return packets.CodeSuccess
			}
			if !chosen && code.Code >= packets.ErrUnspecifiedError.Code {
				refusal, chosen = code, true
			}
			continue
		}
		if hook.Provides(OnConnectAuthenticate) && hook.OnConnectAuthenticate(cl, pk) {
			return packets.CodeSuccess
		}
	}
	return refusal
}
