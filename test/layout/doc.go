// Package layout holds the test of the module's import rules: which package may import
// which, each forbidden import with its reason. It fails `make test` when a change breaks
// the shape docs/design.md describes ("Layout"): a thin agent root over parts with one
// concern each, siblings that do not import each other, data packages without I/O, and
// mochi reached only through agent/broker.
package layout
