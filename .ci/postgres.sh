#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the tests of many workers (tests/pg_fixture.py).
#   .ci/postgres.sh start DIR   install the Debian package if no server binaries are there, create
#                               a cluster in DIR (owned by the postgres user when run as root: initdb
#                               refuses root), start it on 127.0.0.1 only; prints the SQLAlchemy URL
#   .ci/postgres.sh stop DIR    stop it
# The cluster trusts local connections (it listens on loopback and lives as long as the CI run).
set -euo pipefail
cmd=$1 dir=$2
port=${EVO_PG_PORT:-55439}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
as_owner=()
if [ "$(id -u)" = 0 ]; then as_owner=(runuser -u postgres --); fi

if [ "$cmd" = stop ]; then
  "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
  exit 0
fi
if [ -z "$bin" ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
cd "$dir"  # the owner must be able to stand in the working directory
"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U evo --no-sync -E UTF8 > "$dir/initdb.log"
"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >&2
echo "postgresql+psycopg://evo@127.0.0.1:$port/postgres"
