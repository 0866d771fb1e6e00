#!/usr/bin/env bash
# Sourced by .ci/run: starts a throwaway PostgreSQL on loopback for the postgres backend tests
# (issue #13) and exports SESSIONLOG_TEST_POSTGRES; the server stops when the calling shell
# exits. Installs PostgreSQL from Debian's packages when no server binaries are found.
# fsync is off (the tests check behaviour, not durability); SESSIONLOG_PG_FSYNC=on for a
# benchmark. postgres refuses to run as root, so as root the server runs as the `postgres` user (created
# by the package; created here when missing).

pg_bin_dir() {
    local dir
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return 0
    fi
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

if ! PG_BIN="$(pg_bin_dir)"; then
    echo "== installing PostgreSQL (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
    PG_BIN="$(pg_bin_dir)"
fi

PG_DIR="$(mktemp -d /tmp/sessionlog-pg.XXXXXX)"
PG_RUN=()
if [ "$(id -u)" = 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    fi
    chown postgres "$PG_DIR"
    PG_RUN=(runuser -u postgres --)
fi

"${PG_RUN[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
    --no-sync >"$PG_DIR/initdb.log" 2>&1 || { cat "$PG_DIR/initdb.log" >&2; exit 1; }

pg_started=""
for _attempt in 1 2 3 4 5; do
    PG_PORT=$(( 20000 + RANDOM % 40000 ))
    if "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c fsync=${SESSIONLOG_PG_FSYNC:-off}" \
        start >/dev/null 2>&1; then
        pg_started=1
        break
    fi
done
if [ -z "$pg_started" ]; then
    echo ".ci/postgres.sh: PostgreSQL did not start" >&2
    cat "$PG_DIR/server.log" >&2 || true
    exit 1
fi

stop_postgres() {
    "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
}
trap stop_postgres EXIT

export SESSIONLOG_TEST_POSTGRES="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
echo "== PostgreSQL on 127.0.0.1:$PG_PORT for the postgres backend tests"
