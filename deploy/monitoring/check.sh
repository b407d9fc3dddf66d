#!/usr/bin/env bash
# Validates the alert rules: syntax and expressions (promtool check rules),
# then behaviour (promtool test rules: each alert fires on the situation it
# describes and stays quiet on a healthy one). Run by `make test`.
#
# promtool comes from $PROMTOOL, else PATH. When it is missing and we are
# root (CI), it is installed the way .ci/run installs PostgreSQL: Debian's
# `prometheus` package, which ships /usr/bin/promtool.
set -euo pipefail
cd "$(dirname "$0")/../.."

promtool=${PROMTOOL:-promtool}
if ! command -v "$promtool" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "monitoring: promtool missing; installing Debian's prometheus package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "monitoring: promtool not found. Install it (Debian/Ubuntu: sudo apt-get install prometheus;" >&2
    echo "  or a release from prometheus.io) or set PROMTOOL=/path/to/promtool, then run make test again." >&2
    exit 1
  fi
  promtool=promtool
fi

shopt -s nullglob
rules=(deploy/monitoring/*.rules.yml)
tests=(deploy/monitoring/*.test.yml)
if [ ${#rules[@]} -eq 0 ]; then
  echo "monitoring: no deploy/monitoring/*.rules.yml" >&2
  exit 1
fi
"$promtool" check rules "${rules[@]}"
if [ ${#tests[@]} -gt 0 ]; then
  # Test files name their rule files relative to themselves.
  (cd deploy/monitoring && "$promtool" test rules "${tests[@]#deploy/monitoring/}")
fi
