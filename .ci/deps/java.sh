#!/usr/bin/env bash
# Installs what lab/designkit's Java kit test needs, when missing: a JDK 17+
# (javac), the jakarta.servlet API 5, the PostgreSQL JDBC driver and JUnit 5
# (its console launcher), all from Debian. Idempotent; run as root.
set -euo pipefail
J=/usr/share/java
pkgs=()
command -v javac >/dev/null 2>&1 || pkgs+=(openjdk-17-jdk-headless)
[ -f "$J/jakarta-servlet-api.jar" ] || pkgs+=(libjakarta-servlet-api-java)
[ -f "$J/postgresql.jar" ] || pkgs+=(libpostgresql-jdbc-java)
[ -f "$J/junit-platform-console-standalone.jar" ] || pkgs+=(junit5)
if [ ${#pkgs[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
fi
