#!/bin/sh
# Plots the summary of a profiled run as a roofline (PNG, gnuplot).
#
#   scripts/plot_roofline.sh trace.summary.tsv [roofline.png]
#
# The summary is what `train_gpt --profile trace.json` writes beside the
# trace (awl_profiler_write_summary, docs/profiling.md): '#' lines with the
# ceilings measured in the same process (matmul_flops: the sgemm rate,
# copy_bytes: the copy bandwidth, peak_flops: the hardware's peak), then
# one row per op and phase: op, phase, calls, seconds, share, bytes, flops,
# intensity, flops_per_s, bytes_per_s, of_ceiling.
#
# Each op that computes (flops > 0) is a point at its arithmetic intensity
# (FLOP per byte moved) and achieved GFLOP/s, its area proportional to its
# share of the step; the roof is min(matmul rate, intensity x bandwidth),
# and the hardware's peak a dashed line above it. Ops that only move data
# (copies, fills, indexing) have no FLOPs to place: the title counts their
# share.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 SUMMARY.tsv [OUT.png]" >&2
    exit 2
fi
summary=$1
out=${2:-${summary%.tsv}.png}
[ -r "$summary" ] || { echo "$0: cannot read $summary" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "$0: gnuplot not found (make setup installs gnuplot-nox)" >&2; exit 1; }

header() { awk -v key="$1" '$1 == "#" && $2 == key { print $3 }' "$summary"; }
device=$(header device)
matmul=$(header matmul_flops)
copy=$(header copy_bytes)
peak=$(header peak_flops)
[ -n "$matmul" ] && [ -n "$copy" ] ||
    { echo "$0: $summary has no ceilings (# matmul_flops, # copy_bytes)" >&2; exit 1; }

points=$(mktemp "${TMPDIR:-/tmp}/roofline.XXXXXX")
trap 'rm -f "$points"' EXIT
# intensity, GFLOP/s, point size, label ("op (phase) share%"), and whether
# the label goes above (0) or below (1) its point, alternately, so that ops
# of one intensity (a kernel's forward and backward) do not overwrite each
# other; a label only for ops of at least 1% of the step
awk -F '\t' '
    $1 ~ /^#/ || $1 == "op" { next }
    $7 > 0 && $4 > 0 {
        label = $5 >= 0.01 ? sprintf("%s (%s) %.0f%%", $1, $2, 100 * $5) : ""
        printf "%g\t%g\t%g\t%s\t%d\n", $8, $9 / 1e9, 0.6 + 6 * sqrt($5), label, n++ % 2
        next
    }
    { moved += $5 }
    END { printf "# data movement %.0f%%\n", 100 * moved }' "$summary" > "$points"
moved=$(sed -n 's/^# data movement //p' "$points")

gnuplot <<GNUPLOT
set terminal pngcairo noenhanced size 1000,640 font ",11"
set output "$out"
set datafile separator "\t"
set title "awl roofline on $device: ceilings measured in the same process (ops moving only data: $moved of the step)"
set logscale xy
set xlabel "arithmetic intensity (FLOP per byte moved)"
set ylabel "achieved GFLOP/s"
set grid
set key bottom right
set xrange [0.01:1000]
set yrange [0.001:$(awk -v p="${peak:-0}" -v m="$matmul" 'BEGIN { print 3 * (p > m ? p : m) / 1e9 }')]
P = $matmul / 1e9
W = $copy / 1e9
roof(x) = x * W < P ? x * W : P
plot roof(x) with lines lw 2 lc rgb "#2c3e50" title sprintf("roof: sgemm %.1f GFLOP/s, copy %.1f GB/s", P, W), \
     ($peak > 0 ? $peak / 1e9 : 1/0) with lines dt 2 lc rgb "#7f8c8d" title sprintf("hardware peak %.1f GFLOP/s", $peak / 1e9), \
     "$points" using 1:2:3 with points pt 7 ps variable lc rgb "#c0392b" title "ops (area: share of the step)", \
     "$points" using 1:(\$5 == 0 ? \$2 : 1/0):4 with labels left offset 1,0.6 font ",9" notitle, \
     "$points" using 1:(\$5 == 1 ? \$2 : 1/0):4 with labels left offset 1,-0.6 font ",9" notitle
GNUPLOT
echo "wrote $out"
