# Sums `go tool nm -size` symbol sizes by Go module.
# Input 1: "importpath module" lines from `go list -deps`; input 2 ("-"): nm output
# "addr size type name". Prints "module bytes" lines, unsorted.
# A symbol's package is its name up to the first '.' after the last '/'; generic
# instantiations, type descriptors and itabs are attributed the same way after stripping their
# prefixes, so the figures are close, not exact.
FNR == NR { mod[$1] = $2; next }
NF >= 4 {
  size = $2; name = $4
  for (i = 5; i <= NF; i++) name = name " " $i
  sub(/^(type:\.?(eq|hash)?\.?|go:itab\.\*?|go:itab\.)/, "", name)
  sub(/^\*/, "", name)
  sub(/^\(\*?/, "", name)
  slash = 0
  for (i = length(name); i > 0; i--) if (substr(name, i, 1) == "/") { slash = i; break }
  rest = substr(name, slash + 1)
  dot = index(rest, ".")
  pkg = (dot > 0) ? substr(name, 1, slash + dot - 1) : name
  m = (pkg in mod) ? mod[pkg] : ""
  if (m == "std") {
    if (pkg ~ /^(runtime|internal\/)/) m = "runtime"
  }
  if (m == "") m = (pkg ~ /^(go:|type:|runtime)/ || name !~ /\./) ? "runtime" : "other"
  sum[m] += size
}
END { for (m in sum) print m, sum[m] }
