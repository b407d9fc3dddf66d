#!/usr/bin/env bash
# Installs what the Redis and DynamoDB stores' tests and benchmarks start,
# when missing: redis-server and redis-cli (Debian's redis-server package,
# which depends on redis-tools; redistest starts a real standalone server
# and real Clusters, created with redis-cli --cluster create), and Node with
# npm (dynamotest installs dynalite, the DynamoDB API on LevelDB, with npm
# on first use). Idempotent: does nothing when everything is there.
#
# Run by CI (.ci/run) and by `make bench` before its stores' paths (r) and
# (y), so that a fresh machine does not find the gap after the PostgreSQL
# paths' ten minutes. Installing needs root and apt-get; without them it
# names what is missing and how to install it, and fails.
set -euo pipefail

# have reports whether a command is in PATH or where Debian puts it, where
# redistest also looks for redis-server.
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ]; }

pkgs=()
if ! have redis-server || ! have redis-cli; then
	pkgs+=(redis-server)
fi
if ! have node || ! have npm; then
	pkgs+=(nodejs npm)
fi
[ ${#pkgs[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "stores: missing ${pkgs[*]}: install them (Debian: sudo apt-get install ${pkgs[*]}; elsewhere: redis-server and redis-cli, and Node with npm), then run again" >&2
	exit 1
fi
echo "stores: installing Debian's ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
