#!/usr/bin/env bash
# The demo: sets up the test bed, boots one sched_ext node, runs two gangs
# under scx_gang and writes their timeline to target/demo/timeline.svg.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
build_image target/demo/image.cpio.gz
"$SCRIPTS_DIR/cluster.sh" --image target/demo/image.cpio.gz --scenario demo --out target/demo/run --mttcg
cp target/demo/run/node0/timeline.svg target/demo/run/node0/timeline.json target/demo/
step "timeline: target/demo/timeline.svg (summary: target/demo/run/node0/summary.txt)"
