#!/usr/bin/env bash
# Installs what lab/designkit's TypeScript kit tests need (issue 27): Node
# (Debian's nodejs and npm, when missing) and, with npm, the TypeScript
# compiler, Express 4 and the AWS SDK v3 DynamoDB client, at pinned
# versions, into lab/designkit/.node (gitignored). The generated kit links
# its node_modules to lab/designkit/.node/node_modules. Idempotent: does
# nothing when everything is there. dynalite is installed by dynamotest
# itself. Run as root by CI (.ci/run); locally: bash .ci/deps/node.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$root/lab/designkit/.node"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
fi

# name@version, one per package; change a version here and the next run
# reinstalls.
pkgs=(
	typescript@5.9.3
	express@4.21.2
	@types/express@4.17.21
	@types/node@20.19.9
	@aws-sdk/client-dynamodb@3.1178.0
)

stamp="$dir/.installed"
want="$(printf '%s\n' "${pkgs[@]}")"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$dir/node_modules/.bin/tsc" ]]; then
	exit 0
fi

# Install into a fresh folder and move it into place when complete, so that
# a test never sees half an install.
mkdir -p "$(dirname "$dir")"
tmp="$(mktemp -d "$dir.install-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf '{"name":"payonce-designkit-node","private":true}\n' >"$tmp/package.json"
timeout 600 npm install --no-audit --no-fund --save-exact --prefix "$tmp" "${pkgs[@]}"
printf '%s\n' "$want" >"$tmp/.installed"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
