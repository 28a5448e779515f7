#!/usr/bin/env bash
# Compares the release binary's outputs with tests/golden/ (the same
# comparison as the `golden` test, without the test profile's build).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SERVESIM_BIN:-target/release/servesim}
fail=0
for s in scenarios/*.json validation/llmd-exp0/scenario-*.json; do
  flat=$(echo "${s%.json}" | sed 's#/#__#g')
  cmp -s <("$B" simulate "$s" --json) "tests/golden/$flat.simulate.json" || { echo "differs: $flat.simulate"; fail=1; }
  cmp -s <("$B" sweep "$s" --concurrency 1,8,32,128 --json --jobs 2) "tests/golden/$flat.sweep.json" || { echo "differs: $flat.sweep"; fail=1; }
done
[ $fail = 0 ] && echo "golden: all identical"
exit $fail
