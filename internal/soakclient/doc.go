// Package soakclient is a state store client that looks on the wire like the Azure IoT
// Operations Go SDK's statestore client over its session client (go/services/statestore
// over go/mqtt, paho underneath), for soak tests of the embedded broker and store. It is
// our own code on internal/mqttwire, so that a test can drive one connection as hard as the
// SDK does, count what comes back, and say exactly what went wrong.
//
// What it sends, as the SDK does:
//
//   - CONNECT with Clean Start false (also the first time), Session Expiry 0xFFFFFFFF,
//     Receive Maximum 65535, keep alive 60 s, user property metriccategory=aiosdk-go;
//     after a lost connection it connects again the same way and requires the session to
//     be present (the SDK fails with "session lost" otherwise).
//   - SUBSCRIBE of its response topic
//     clients/{UPPERHEX(clientId)}/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response
//     at QoS 1 with No Local, once (a present session keeps it).
//   - Requests as QoS 1 PUBLISHes on the invoke topic, packet ids taken in sequence (the
//     SUBSCRIBE takes the first), RESP3 payloads, payload format 0, Message Expiry = the
//     timeout in whole seconds, content type application/octet-stream, the response
//     topic, correlation data (a UUID's 16 bytes), and user properties __srcId (the client id),
//     __ts (an HLC, %015d:%05d:%s), __protVer=1.0, $partition (the client id) and
//     $high_priority (empty). After a reconnect, every request the broker had not
//     acknowledged is sent again under its packet id with DUP, as MQTT requires.
//   - A PUBACK for each response in the long form (40 04 id 00 00), written as soon as
//     the response is read; PINGREQ when nothing was written for 3/4 of the keep alive.
//   - Close: DISCONNECT with Session Expiry 0, which ends the session, as the SDK's Stop.
//
// Run sends SET, GET, DEL, GET in turn on one key per slot, with a fixed number of slots
// (requests in flight), each waiting for its answer before its next request, and checks
// every answer: the topic, QoS 1, the correlation data of a request it sent, __stat=200,
// __protVer=1.0, content type, the RESP3 reply (+OK; the value last set, or a null blob
// without __ts; :1 or :0), a parseable __ts where a version exists. What the key holds is
// known exactly except across a lost connection (keys not kept with aio-persistence do not
// survive a broker restart, and a request in flight may or may not have run): until the
// slot's next SET, only the reply's shape is checked.
//
// # Exactly the answers it had not acknowledged
//
// The client tracks every request by its correlation data (a per-client random prefix and
// the request's number), so a Report can say, after any number of reconnects:
//
//   - Unanswered: requests that never got an answer (within Timeout, or at all).
//   - Phantoms: answers for a request already answered and acknowledged, beyond what MQTT
//     allows. Allowed are one more answer for each time the request was sent again after a
//     reconnect (the broker may have run it before the connection dropped, and its stored
//     answer comes back along with the new one), and one for an answer acknowledged less
//     than AckGrace before the connection dropped (the broker may not have stored the
//     acknowledgement: "at least once"). Anything more is a message the broker kept
//     although it was acknowledged.
//   - Unknown: answers whose correlation data the client never sent.
//   - LostInCrash: requests the broker acknowledged (PUBACK) that were unanswered when the
//     connection dropped, not covered by a barrier, and never answered after: answers a
//     crash lost. The embedded broker acknowledges a state store request only once its
//     answer is stored for a kept session, so Report.Err fails on any.
//
// Client.Barrier makes both bounds exact: once it returns, the broker has stored every
// acknowledgement the client wrote before it, and the answer to every request written
// before it. After a drop, an answer acknowledged before the last barrier coming again is
// a phantom however recent, and a request written before it left unanswered is not a
// crash's loss.
//
// A resumed session's stored messages are written by the broker before it reads anything
// from the new connection, so by the time later requests are answered, everything it had
// kept for the session has arrived (up to the client's Receive Maximum): the Report of a
// Run is complete when Run returns.
package soakclient
