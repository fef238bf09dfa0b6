#!/bin/sh
# Plots a train_gpt CSV log as a PNG with gnuplot.
#
#   scripts/plot_loss.sh train_log.csv [loss.png]
#
# The log's columns (train_gpt writes the header): step, train_loss,
# val_loss, lr, tokens_per_sec, mfu, elapsed_s. Validation loss is only
# present on evaluation steps; gnuplot skips the empty cells.
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 LOG.csv [OUT.png]" >&2
    exit 2
fi
log=$1
out=${2:-${log%.csv}.png}
[ -r "$log" ] || { echo "$0: cannot read $log" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "$0: gnuplot not found (make setup installs gnuplot-nox)" >&2; exit 1; }
gnuplot <<GNUPLOT
set terminal pngcairo noenhanced size 900,540 font ",11"
set output "$out"
set datafile separator ","
set datafile missing ""
set key autotitle columnhead top right
set title "awl train_gpt: $(basename "$log")"
set xlabel "step"
set ylabel "loss (nats/token)"
set grid
plot "$log" using 1:2 with lines lw 1 lc rgb "#7aa6c2" title "train", \
     "$log" using 1:3 with linespoints pt 7 ps 0.8 lw 2 lc rgb "#c0392b" title "validation"
GNUPLOT
echo "wrote $out"
