// Package resp3 is a zero-allocation RESP3 reader and writer for the state store's payloads.
//
// MQTT delivers whole messages, so the reader works on a complete []byte and returns views
// (sub-slices) into it. A returned view is valid while the input slice lives and is not
// modified.
package resp3
