#!/usr/bin/env bash
# Installs what lab/designkit's Python kits need (run as root by .ci/run):
# Debian's python3 with Django, FastAPI, pytest, PyMySQL, psycopg 3, redis
# and httpx, and mariadb-server for a throwaway MariaDB. Idempotent: it
# touches apt only when a package is missing.
set -euo pipefail

pkgs=(python3 python3-django python3-fastapi python3-pytest python3-pymysql
      python3-psycopg python3-redis python3-httpx mariadb-server)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
echo "python.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The Debian package starts no server we need: the tests run their own
# mariadbd in a temporary folder. Stop one the install may have started.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet mariadb 2>/dev/null; then
	systemctl stop mariadb || true
fi
