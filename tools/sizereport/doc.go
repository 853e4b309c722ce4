// Command sizereport says what each Go module costs in a binary: it sums the sizes of the
// binary's ELF symbols by the module their package belongs to. Symbols in sections that take no
// file space (.bss, .noptrbss: e.g. crypto's 32 MiB DRBG buffer) are left out, so the figures add
// up to at most the file size; what no symbol covers (symbol and line tables, headers, padding)
// is reported by kind: loaded tables (.gopclntab), what stripping removes, headers and padding.
//
//	go list -deps -f '{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{else}}std{{end}}' PKG > mods
//	go build -trimpath -ldflags=-w -o bin PKG   # not -s: the symbol table is needed
//	go run ./tools/sizereport mods bin
//
// Output: a Markdown table, largest first. "runtime" is the Go runtime and the compiler's
// per-binary tables (go:func.*, type descriptors); "std" is the rest of the standard library.
// Generic instantiations and itabs are charged to the package named first in the symbol, so the
// figures are close, not exact; `make size-report` runs it.
package main
