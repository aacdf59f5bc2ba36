#!/bin/sh
# Check the alert rules and run their promtool unit tests, as `make test` does:
#   hack/test-alerts.sh
# promtool reads plain rule files, not the PrometheusRule object, so the object's `spec`
# is written as rules.yaml next to a copy of config/prometheus/tests/alerts_test.yaml
# (which names rules.yaml) in a temporary directory. promtool: hack/promtool.sh.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/^spec:$/,$p' "$root/config/prometheus/prometheus_rule.yaml" | tail -n +2 \
    | sed 's/^  //' >"$tmp/rules.yaml"
cp "$root/config/prometheus/tests/alerts_test.yaml" "$tmp/"
cd "$tmp"
"$root/hack/promtool.sh" check rules rules.yaml
"$root/hack/promtool.sh" test rules alerts_test.yaml
