// Package store is a client for the Azure IoT Operations state store (and the faithful copy
// embedded in agent/broker): a key-value store reached over MQTT5 request/response, with RESP3
// payloads, hybrid-logical-clock versions, fencing tokens and key notifications.
//
// # Tutorial
//
//	c, err := store.Connect(ctx, &store.Options{URL: "mqtt://127.0.0.1:1883"})
//	if err != nil { … }
//	defer c.Close()
//
//	v, err := c.Set(ctx, "greeting", []byte("hello"), &store.SetOptions{Expiry: time.Minute})
//	e, err := c.Get(ctx, "greeting")            // e.Value, e.Version (== v)
//	if errors.Is(err, store.ErrNotFound) { … }
//
//	// Conditional writes: NX, NEX; a condition that fails is ErrNotApplied.
//	_, err = c.Set(ctx, "lock", []byte("me"), &store.SetOptions{Condition: store.NotExistsOrEqual, Expiry: 10 * time.Second})
//
//	// Notifications, resumed across reconnects.
//	w, err := c.KeyNotify(ctx, "greeting")
//	for n := range w.C() { fmt.Println(n.Op, string(n.Value), n.Version) }
//
//	// Leases: a lock with a fencing token, renewed in the background.
//	l, err := c.Acquire(ctx, "faceagent/gw-01/leader", &store.LeaseOptions{TTL: 10 * time.Second})
//	_, err = l.Edit(ctx, "faceagent/gw-01/config", func(old []byte, found bool) ([]byte, error) { … })
//	select { case <-l.Lost(): … l.Err() … }
//	l.Release(ctx)
//
// # Leases
//
// A lease is the protocol document's lock: SET name holder NEX PX ttl takes it and renews it
// (every TTL/3 by default), VDEL name holder releases it. Its version is the fencing token:
// Lease.Edit reads a protected key and writes it back with that token as __ft, so a holder
// that lost the lease without knowing it (paused, partitioned) cannot overwrite its
// successor's writes: the store refuses the older token. The lease watches its own key, so
// losing it (deleted, taken over, a renewal refused, or not renewed within the TTL) closes
// Lost at once.
//
// # How requests travel
//
// Each request is a QoS 1 PUBLISH to the store's invoke topic with a response topic
// (clients/{clientId}/services/statestore/_any_/command/invoke/response, subscribed and its
// SUBACK awaited before the first request), 16 random bytes of correlation data registered
// before the PUBLISH leaves (a response can beat the PUBACK), a Message Expiry equal to the
// timeout, and the user properties the SDKs send: __ts from the client's hlc.Clock, __protVer
// 1.0, __srcId, $partition, $high_priority, and __ft / aio-persistence when asked for. Every
// response's __ts is observed by the same clock. Any number of requests may be in flight on the
// one connection; the correlator is the client's own (paho's rpc extension loses responses
// under load and never re-subscribes). Where the service differs from the protocol
// document, the client follows the service: docs/design.md "State store wire facts"
// ("wire fact N" in this package's comments).
//
// # Connection loss
//
// The client reconnects with exponential backoff and full jitter. Requests in flight when the
// link drops fail at once with ErrConnectionLost; so do requests waiting for a fresh
// connection's SUBSCRIBE to be acknowledged (those were never sent: their error matches
// ErrNotConnected too). Requests made while the link is down fail at once with
// ErrNotConnected (all Retryable). Every wait is bounded by the request's context and
// timeout. Behind a broker that is not the store, a request no
// store is subscribed to (the store is reconnecting too) fails at once with ErrNoResponder
// (Retryable) when the broker says so with PUBACK 0x10, as mosquitto does. After a reconnect
// the client subscribes again (a SUBSCRIBE without SUBACK is sent again), waits
// for the SUBACK, sends KEYNOTIFY for every watched key again (the store drops registrations
// of a disconnected client), GETs each such key and, when it changed meanwhile, delivers a
// notification with Resync set, so no change goes unnoticed.
//
// # Caveats
//
//   - A request that failed with ErrTimeout or ErrConnectionLost may have been applied.
//   - A Resync notification reports the current state only: several changes made while the
//     client was away arrive as one.
//   - Values returned by Get and carried by notifications are views into the received packet;
//     they are the caller's, but the Watches of one key share a notification's Value.
//   - A Watch whose reader falls behind queues at most Options.WatchBuffer notifications
//     (each keeps its value); past that the oldest are dropped and the oldest one kept is
//     marked Resync: the reader sees that it missed changes, and the latest state still
//     arrives.
//   - Requests made while the link is down are not queued: retry them (see Retryable).
package store
