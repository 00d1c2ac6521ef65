#!/bin/bash
# bench/ab.py over the suite's batch apps, each launched as the bench launches it (its work
# directory as HOME and TMPDIR, its environment), on a copy of the bench database.
#
#   bench/lab/ab-apps.sh ROUNDS DB VARIANT... [-- APP...]
#
# A VARIANT is NAME=ARGS as for bench/ab.py; `,+WARMSTART_DB=DB,--app,APP` is put after
# each one's ARGS (cold and warm are always run). APPs default to the batch apps of the suite.
# Example (docs/measurements.md, 2026-11-29, ninth entry):
#   cp /var/lib/warmstart/bench/bench.db /tmp/ab.db
#   bench/lab/ab-apps.sh 10 /tmp/ab.db new= old=@/tmp/warmstart-old, -- soffice-convert npm-version
set -e
R=$1 DB=$2
shift 2
variants=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do variants+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
apps=("$@")
[ ${#apps[@]} -eq 0 ] && apps=(soffice-convert gimp-batch chromium-dump-dom inkscape-export python-imports r-vanilla pdflatex java-single-file npm-version)
B=/var/lib/warmstart/bench
cd "$(dirname "$0")/../.."
for app in "${apps[@]}"; do
  W=$B/work/$app
  vs=()
  for v in "${variants[@]}"; do
    name=${v%%=*} args=${v#*=}
    vs+=("$name=${args%,}${args:+,}+WARMSTART_DB=$DB,--app,$app")
  done
  extra=()
  case $app in
    soffice-convert) cmd=(soffice -env:UserInstallation=file://$W/profile --headless --convert-to pdf --outdir $W $W/doc.txt);;
    gimp-batch) extra=(GIMP2_DIRECTORY=$W/gimp-profile); cmd=(gimp -i -b '(gimp-quit 0)');;
    chromium-dump-dom) cmd=(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
      --disable-background-networking --disable-component-update --disable-sync
      --user-data-dir=$W/chrome-profile --dump-dom file://$W/page.html);;
    inkscape-export) cmd=(inkscape --export-type=png --export-filename=$W/drawing.png $W/drawing.svg);;
    python-imports) extra=(MPLBACKEND=Agg MPLCONFIGDIR=$W/mpl)
      cmd=($B/venv/bin/python -c "import numpy, pandas, matplotlib.pyplot, sympy, requests, json, email, asyncio");;
    r-vanilla) cmd=(R --vanilla --quiet -e 'x <- summary(lm(dist ~ speed, data = cars)); print(x$r.squared)');;
    pdflatex) cmd=(pdflatex -interaction=batchmode -output-directory=$W $W/doc.tex);;
    java-single-file) cmd=(java $W/Hello.java);;
    npm-version) extra=(npm_config_update_notifier=false npm_config_cache=$W/npm-cache); cmd=(npm --version);;
    *) echo "unknown app $app (batch suite apps only)" >&2; exit 2;;
  esac
  echo "=== $app"
  env HOME=$W TMPDIR=$W "${extra[@]}" bench/ab.py "$R" cold warm "${vs[@]}" -- "${cmd[@]}"
done
