// Package sswire holds the state store's MQTT topic names, shared by the
// embedded broker (agent/broker) and the client (agent/store) without either
// importing the other. It has no dependencies, so that the client binaries
// (sscli) stay small.
package sswire
