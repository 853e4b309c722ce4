// Package kv is the state store as the agent's parts use it: Get, Set with an expiry,
// and Watch, on keys of the embedded broker's store engine or of an external state store.
// Device state (agent/devstate) and remote config and control (agent/remote) are written
// against it, and do not know which store is behind it.
//
// # Tutorial
//
//	var keys kv.Store = kv.Engine{Store: b.Store(), Clock: clock} // the embedded store
//	keys = kv.Client{C: sc}                                       // or an agent/store client
//	err := keys.Set(ctx, "faceagent/gw/devices/d1", state, 90*time.Second)
//	value, found, err := keys.Get(ctx, "faceagent/gw/config")
//	changed, stop, err := keys.Watch(ctx, "faceagent/gw/config")
//	defer stop()
//	for range changed { ...read the key again... }
//
// # Invariants
//
//   - A refusal (the store answered, with an error: a full store, a fenced key, a key the
//     writer may not write) is a *store.ServerError with the protocol's text, from either
//     adapter: errors.Is matches agent/store's sentinels (store.ErrQuotaExceeded,
//     store.ErrFencingTokenLowerVersion…), so a caller classifies refusals one way for
//     both stores. Any other error (no link, a timeout) is not a *store.ServerError.
//   - Engine writes as the store's owner (statestore.SetOptions.Owner): the keys the
//     agent reserves for itself in the embedded store (its device state, the status
//     keys of remote management) are writable by it alone. It stamps every request with
//     its hlc.Clock and observes the versions the store returns, as a client does.
//   - Watch signals on a channel of capacity 1 that coalesces: a signal means "the key
//     may have changed, read it again", never the change itself. The first read after
//     Watch returned sees every change before it.
//
// # Caveats
//
//   - Engine never blocks on I/O and ignores ctx. Client's requests are bounded by ctx
//     and by the client's request timeout.
//   - Client's watches survive reconnects: a change missed while the link was down
//     arrives as a signal once it is back (agent/store's Resync notification).
package kv
