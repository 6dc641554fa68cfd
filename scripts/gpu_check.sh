#!/usr/bin/env bash
# The GPU check: one prepared run for the day a GPU machine is lent (see scripts/gpu_check.py).
#
#   bash scripts/gpu_check.sh --prepare     # here: SmolLM2's config + tokenizer and the wheels, into .gpu_check/
#   bash scripts/gpu_check.sh --dry-run     # the plan, and whether its inputs are there (exit 2 if not)
#   bash scripts/gpu_check.sh --out "$OUT/gpu_check.json"   # on the GPU machine, carrying .gpu_check
#
# The GPU machine reaches no package registry: the wheels in .gpu_check/wheels (what aloft needs beyond
# its image) are installed into a directory of their own first, ahead of the image's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
site=/tmp/aloft-gpu-check-site
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
case " $* " in
  *" --prepare "* | *" --dry-run "*) ;;
  *)
    # Only where aloft's own needs are missing (the GPU image): here they are installed already, and
    # the wheels, built for the GPU image's Python 3.12, would not load.
    if compgen -G ".gpu_check/wheels/*.whl" >/dev/null && ! python3 -c "import pydantic" 2>/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .gpu_check/wheels/*.whl
      export PYTHONPATH="$site:$PYTHONPATH"
    fi
    ;;
esac
exec python3 scripts/gpu_check.py "$@"
