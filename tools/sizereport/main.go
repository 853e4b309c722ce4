package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: sizereport MODULES-FILE BINARY")
		os.Exit(2)
	}
	mods, err := readModules(os.Args[1])
	if err == nil {
		err = report(os.Stdout, mods, os.Args[2])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizereport:", err)
		os.Exit(1)
	}
}

func readModules(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mods := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pkg, mod, ok := strings.Cut(sc.Text(), " "); ok {
			mods[pkg] = mod
			mods["main"] = mod // go list -deps prints the main package last; its symbols say "main."
		}
	}
	return mods, sc.Err()
}

// symbolPackage returns the import path a symbol name belongs to: the text up to the first
// '.' after the last '/', after dropping the compiler's prefixes.
func symbolPackage(name string) string {
	if strings.HasPrefix(name, "go:func.") {
		return "go:func.*" // the compiler's function metadata, not a package
	}
	for _, p := range []string{"go:itab.*", "go:itab.", "type:.eq.", "type:.hash.", "type:*", "type:", "go:"} {
		if strings.HasPrefix(name, p) {
			name = name[len(p):]
			break
		}
	}
	name = strings.TrimLeft(name, "*(")
	if i := strings.IndexAny(name, "[ "); i >= 0 { // generic instantiation arguments
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		return name[:slash+1+dot]
	}
	return name
}

func moduleOf(mods map[string]string, sym string) string {
	pkg := symbolPackage(sym)
	m, ok := mods[pkg]
	switch {
	case !ok && (strings.HasPrefix(sym, "go:") || strings.HasPrefix(sym, "type:") || strings.HasPrefix(sym, "runtime.")):
		return "runtime"
	case !ok:
		return "other"
	case m == "std" && (pkg == "runtime" || strings.HasPrefix(pkg, "runtime/") || strings.HasPrefix(pkg, "internal/")):
		return "runtime"
	}
	return m
}

// How many packages the second table lists.
const topPackages = 20

func report(w io.Writer, mods map[string]string, binary string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w (build it without -s)", binary, err)
	}
	st, err := os.Stat(binary)
	if err != nil {
		return err
	}
	sum := map[string]int64{}
	byPkg := map[string]int64{}
	inSection := make([]int64, len(f.Sections))
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) || s.Size == 0 {
			continue
		}
		if f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue // .bss/.noptrbss: zeroed at start, no bytes in the file
		}
		sum[moduleOf(mods, s.Name)] += int64(s.Size)
		byPkg[symbolPackage(s.Name)] += int64(s.Size)
		inSection[s.Section] += int64(s.Size)
	}
	// File bytes no symbol covers: loaded tables (mostly .gopclntab, the runtime's function
	// and line tables) and what -s -w would drop (.symtab, .strtab, DWARF).
	var covered int64
	for i, sec := range f.Sections {
		if sec.Type == elf.SHT_NOBITS || sec.Type == elf.SHT_NULL {
			continue
		}
		rest := int64(sec.Size) - inSection[i]
		covered += int64(sec.Size)
		if rest <= 0 {
			continue
		}
		if sec.Flags&elf.SHF_ALLOC != 0 {
			sum["(runtime tables: .gopclntab, …)"] += rest
		} else {
			sum["(symbol table and debug info: removed by -s -w)"] += rest
		}
	}
	if other := st.Size() - covered; other > 0 {
		sum["(ELF headers, padding)"] += other
	}
	names := make([]string, 0, len(sum))
	for m := range sum {
		names = append(names, m)
	}
	sort.Slice(names, func(i, j int) bool { return sum[names[i]] > sum[names[j]] })
	fmt.Fprintf(w, "| module | bytes | share |\n|---|---:|---:|\n")
	for _, m := range names {
		fmt.Fprintf(w, "| %s | %d | %.1f%% |\n", m, sum[m], 100*float64(sum[m])/float64(st.Size()))
	}
	fmt.Fprintf(w, "| **file (unstripped)** | %d | 100%% |\n", st.Size())

	// The largest packages, whatever their module: where the standard library's share goes.
	pkgs := make([]string, 0, len(byPkg))
	for p := range byPkg {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return byPkg[pkgs[i]] > byPkg[pkgs[j]] })
	fmt.Fprintf(w, "\n| largest packages | bytes |\n|---|---:|\n")
	for _, p := range pkgs[:min(topPackages, len(pkgs))] {
		fmt.Fprintf(w, "| %s | %d |\n", p, byPkg[p])
	}

	// Every package of the main module: what each part of the program costs (the operator's
	// page, agent/ui, with its embedded page among them).
	main := mods["main"]
	fmt.Fprintf(w, "\n| %s packages | bytes |\n|---|---:|\n", main)
	for _, p := range pkgs {
		if p != "main" && mods[p] == main {
			fmt.Fprintf(w, "| %s | %d |\n", strings.TrimPrefix(p, main+"/"), byPkg[p])
		}
	}
	return nil
}
