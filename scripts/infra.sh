#!/usr/bin/env bash
# Real PostgreSQL, Redis, Apache Kafka (KRaft), stripe-mock and a development SMTP server on
# loopback, for development, tests and demos.
#
#   scripts/infra.sh up                 start all five (reuses what already answers), print URLs
#   scripts/infra.sh down               stop all five
#   scripts/infra.sh status             which ones answer
#   scripts/infra.sh env                print the connection settings as shell exports
#   scripts/infra.sh start|stop NAME    one of postgres, redis, kafka, stripe-mock, mail
#
# The SMTP server is the project's own (`billing mail-server`, aiosmtpd, from the virtualenv that
# `make venv` builds): it keeps every message it receives as a file under $BILLING_VAR/mail/new/.
#
# stripe-mock (Stripe's own API mock: it checks each request against Stripe's OpenAPI spec and
# answers with fixture objects) is built with `go install` into $BILLING_VAR/bin when missing.
#
# Everything lives under $BILLING_VAR (default: ./var, ignored by git). Ports are chosen away from
# the defaults so a server that already runs on this machine is never touched.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VAR="${BILLING_VAR:-$ROOT/var}"
PG_PORT="${BILLING_PG_PORT:-55432}"
REDIS_PORT="${BILLING_REDIS_PORT:-56379}"
KAFKA_PORT="${BILLING_KAFKA_PORT:-59092}"
KAFKA_CONTROLLER_PORT="${BILLING_KAFKA_CONTROLLER_PORT:-59093}"
STRIPE_MOCK_PORT="${BILLING_STRIPE_MOCK_PORT:-52111}"
STRIPE_MOCK_HTTPS_PORT="${BILLING_STRIPE_MOCK_HTTPS_PORT:-52112}" # unused, but always opened
STRIPE_MOCK_VERSION=v0.203.0
MAIL_PORT="${BILLING_MAIL_PORT:-52525}"
PG_USER=billing
PG_DB=billing

log() { printf '[infra] %s\n' "$*" >&2; }
die() { printf '[infra] ERROR: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port seconds name [pid-file log-file]
  local i pid=""
  [[ -n "${4:-}" && -f "$4" ]] && pid="$(cat "$4")"
  for ((i = 0; i < $2 * 10; i++)); do
    port_open "$1" && return 0
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      show_log "${5:-}"
      log "$3 exited before opening port $1"
      return 1
    fi
    sleep 0.1
  done
  show_log "${5:-}"
  log "$3 did not open port $1 within $2 s (logs: $VAR/log)"
  return 1
}

show_log() { # file: its last lines, so a failed start says why
  [[ -n "$1" && -f "$1" ]] || return 0
  log "last lines of $1:"
  tail -n 40 "$1" | sed 's/^/[infra]   /' >&2
}

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null || die "missing $* and no apt-get to install it"
  if [[ $APT_UPDATED -eq 0 ]]; then
    log "apt-get update"
    as_root apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  log "installing $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ---------------------------------------------------------------- PostgreSQL
pg_bin() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [[ -z "$d" || ! -x "$d/postgres" ]]; then
    apt_install postgresql postgresql-contrib
    d="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  fi
  echo "$d"
}

# PostgreSQL refuses to run as root: as root we run it as the "postgres" system user.
pg_run() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_prepare_dirs() {
  mkdir -p "$VAR/pg" "$VAR/log"
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$VAR/pg" postgres
    # the postgres user must be able to reach the data directory
    local p="$VAR/pg"
    while [[ "$p" != "/" ]]; do
      p="$(dirname "$p")"
      runuser -u postgres -- test -x "$p" || chmod o+x "$p"
    done
    chown -R postgres: "$VAR/pg"
    touch "$VAR/log/postgres.log" && chown postgres: "$VAR/log/postgres.log"
  fi
}

# A 1st of the month writes about 4 KB of WAL per renewed invoice (4 GB for 1 M). Checkpoints
# every 30 min or 16 GB of WAL keep one from starting in the middle of the drain (after one, the
# first change of every page is logged whole again), lz4 shrinks those full pages, and shared
# buffers of a quarter of the memory (256 MB to 3 GB) keep the backends from writing out dirty
# pages themselves: two renewers drain 1 M in a median 132 s instead of 148 s on 2 cores.
pg_tuning() {
  local mem_mb shared_mb
  mem_mb=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024))
  shared_mb=$((mem_mb / 4))
  ((shared_mb <= 3072)) || shared_mb=3072
  ((shared_mb >= 256)) || shared_mb=256
  cat <<EOF
shared_buffers = ${shared_mb}MB
work_mem = 16MB
maintenance_work_mem = 256MB
max_wal_size = 16GB
checkpoint_timeout = 30min
wal_compression = lz4
EOF
}

pg_up() {
  if port_open "$PG_PORT"; then log "postgres already answers on $PG_PORT"; return; fi
  local bin
  bin="$(pg_bin)"
  pg_prepare_dirs
  if [[ ! -f "$VAR/pg/data/PG_VERSION" ]]; then
    log "initdb $VAR/pg/data"
    pg_run "$bin/initdb" -D "$VAR/pg/data" -U "$PG_USER" --auth=trust --encoding=UTF8 \
      --locale=C.UTF-8 >/dev/null
    cat >>"$VAR/pg/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$VAR/pg'
max_connections = 300
timezone = 'UTC'
log_timezone = 'UTC'
EOF
  fi
  # The tuning lives in its own file, rewritten on every start, so a data directory made by an
  # older checkout gets it too (a later line of postgresql.conf wins).
  grep -q "^include_if_exists = 'billing.conf'" "$VAR/pg/data/postgresql.conf" \
    || echo "include_if_exists = 'billing.conf'" >>"$VAR/pg/data/postgresql.conf"
  pg_tuning >"$VAR/pg/data/billing.conf"
  [[ $(id -u) -ne 0 ]] || chown postgres: "$VAR/pg/data/billing.conf"
  rm -f "$VAR/pg/data/postmaster.pid.stale"
  pg_run "$bin/pg_ctl" -D "$VAR/pg/data" -l "$VAR/log/postgres.log" -w -t 60 start >/dev/null \
    || die "postgres failed to start (see $VAR/log/postgres.log)"
  wait_port "$PG_PORT" 60 postgres || exit 1
  if ! "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc \
    "select 1 from pg_database where datname='$PG_DB'" | grep -q 1; then
    "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" "$PG_DB"
  fi
  log "postgres up on $PG_PORT"
}

pg_down() {
  [[ -f "$VAR/pg/data/postmaster.pid" ]] || { log "postgres not running"; return; }
  pg_run "$(pg_bin)/pg_ctl" -D "$VAR/pg/data" -m fast -w -t 60 stop >/dev/null || true
  log "postgres stopped"
}

# ---------------------------------------------------------------- Redis
redis_up() {
  if port_open "$REDIS_PORT"; then log "redis already answers on $REDIS_PORT"; return; fi
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p "$VAR/redis" "$VAR/log"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$VAR/redis" --daemonize yes \
    --pidfile "$VAR/redis/redis.pid" --logfile "$VAR/log/redis.log" --save "" \
    --appendonly no --protected-mode yes >/dev/null
  wait_port "$REDIS_PORT" 30 redis || exit 1
  log "redis up on $REDIS_PORT"
}

redis_down() {
  if [[ -f "$VAR/redis/redis.pid" ]] && kill -0 "$(cat "$VAR/redis/redis.pid")" 2>/dev/null; then
    kill "$(cat "$VAR/redis/redis.pid")"
    local i
    for ((i = 0; i < 100; i++)); do port_open "$REDIS_PORT" || break; sleep 0.1; done
    log "redis stopped"
  else
    log "redis not running"
  fi
}

# ---------------------------------------------------------------- Kafka (KRaft)
kafka_libs() {
  local libs="$VAR/kafka/libs"
  if [[ ! -f "$libs/.complete" ]]; then
    command -v java >/dev/null || apt_install default-jre-headless
    command -v mvn >/dev/null || apt_install maven
    log "resolving the Kafka broker class path from Maven Central (cached in ~/.m2)"
    mkdir -p "$libs"
    (cd "$ROOT/deploy/kafka" && mvn -q -B dependency:copy-dependencies \
      -DoutputDirectory="$libs" >"$VAR/log/kafka-maven.log" 2>&1) \
      || die "maven could not resolve Kafka (see $VAR/log/kafka-maven.log)"
    touch "$libs/.complete"
  fi
  echo "$libs"
}

kafka_up() {
  if port_open "$KAFKA_PORT"; then log "kafka already answers on $KAFKA_PORT"; return; fi
  port_open "$KAFKA_CONTROLLER_PORT" \
    && die "port $KAFKA_CONTROLLER_PORT (Kafka's controller) is taken by another program"
  mkdir -p "$VAR/kafka" "$VAR/log/kafka"
  local libs
  libs="$(kafka_libs)"
  kafka_start "$libs" && return
  # A broker that died on start is retried once on fresh storage: the data here is only ever
  # development and test data, and a half-written first format is the usual cause.
  log "kafka failed to start; retrying once on fresh storage"
  kafka_down
  rm -rf "$VAR/kafka/data"
  kafka_start "$libs" || die "kafka did not start (logs: $VAR/log/kafka.out, $VAR/log/kafka)"
}

kafka_start() { # libs
  local libs="$1" conf="$VAR/kafka/server.properties"
  sed -e "s#@PORT@#$KAFKA_PORT#g" -e "s#@CONTROLLER_PORT@#$KAFKA_CONTROLLER_PORT#g" \
    -e "s#@DATA_DIR@#$VAR/kafka/data#g" "$ROOT/deploy/kafka/server.properties.in" >"$conf"
  if [[ ! -f "$VAR/kafka/data/meta.properties" ]]; then
    local cid
    cid="$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    log "formatting Kafka storage (cluster $cid)"
    java -cp "$libs/*" -Dlog4j2.configurationFile="$ROOT/deploy/kafka/log4j2.yaml" \
      -Dkafka.logs.dir="$VAR/log/kafka" kafka.tools.StorageTool format -t "$cid" -c "$conf" \
      --ignore-formatted >"$VAR/log/kafka-format.log" 2>&1 \
      || { show_log "$VAR/log/kafka-format.log"; log "kafka storage format failed"; return 1; }
  fi
  nohup java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/deploy/kafka/log4j2.yaml" -Dkafka.logs.dir="$VAR/log/kafka" \
    -cp "$libs/*" kafka.Kafka "$conf" >"$VAR/log/kafka.out" 2>&1 &
  echo $! >"$VAR/kafka/kafka.pid"
  wait_port "$KAFKA_PORT" 240 kafka "$VAR/kafka/kafka.pid" "$VAR/log/kafka.out" \
    || { show_log "$VAR/log/kafka/server.log"; return 1; }
  log "kafka up on $KAFKA_PORT"
}

kafka_down() {
  local pidf="$VAR/kafka/kafka.pid"
  if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    local pid i
    pid="$(cat "$pidf")"
    kill "$pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    rm -f "$pidf"
    log "kafka stopped"
  else
    log "kafka not running"
  fi
}

# ---------------------------------------------------------------- stripe-mock
stripe_mock_bin() {
  local bin="$VAR/bin/stripe-mock"
  if [[ ! -x "$bin" ]] || [[ "$(cat "$VAR/bin/.stripe-mock-version" 2>/dev/null)" != "$STRIPE_MOCK_VERSION" ]]; then
    # stripe-mock needs Go >= 1.22 (Debian 13's golang-go is 1.24; a newer toolchain in
    # /usr/local/go is used when there is one).
    command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]] || apt_install golang-go
    local go
    go="$(command -v go || echo /usr/local/go/bin/go)"
    mkdir -p "$VAR/bin" "$VAR/log"
    log "go install github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION"
    GOBIN="$VAR/bin" "$go" install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION" \
      >"$VAR/log/stripe-mock-install.log" 2>&1 \
      || die "stripe-mock could not be installed (see $VAR/log/stripe-mock-install.log)"
    echo "$STRIPE_MOCK_VERSION" >"$VAR/bin/.stripe-mock-version"
  fi
  echo "$bin"
}

stripe_mock_up() {
  if port_open "$STRIPE_MOCK_PORT"; then
    log "stripe-mock already answers on $STRIPE_MOCK_PORT"
    return
  fi
  local bin
  bin="$(stripe_mock_bin)"
  mkdir -p "$VAR/stripe-mock" "$VAR/log"
  # Both listeners on loopback: without -https-addr it opens HTTPS on every interface (:12112).
  nohup "$bin" -http-addr "127.0.0.1:$STRIPE_MOCK_PORT" \
    -https-addr "127.0.0.1:$STRIPE_MOCK_HTTPS_PORT" >"$VAR/log/stripe-mock.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$VAR/stripe-mock/stripe-mock.pid"
  wait_port "$STRIPE_MOCK_PORT" 30 stripe-mock || exit 1
  sleep 0.5 # a listener that failed to bind ends the process just after the first one opened
  kill -0 "$pid" 2>/dev/null || die "stripe-mock exited (see $VAR/log/stripe-mock.log)"
  log "stripe-mock up on $STRIPE_MOCK_PORT"
}

stripe_mock_down() {
  local pidf="$VAR/stripe-mock/stripe-mock.pid"
  if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    kill "$(cat "$pidf")"
    rm -f "$pidf"
    log "stripe-mock stopped"
  else
    log "stripe-mock not running"
  fi
}

# ---------------------------------------------------------------- development SMTP server
mail_up() {
  if port_open "$MAIL_PORT"; then log "mail server already answers on $MAIL_PORT"; return; fi
  local bin="$ROOT/.venv/bin/billing"
  [[ -x "$bin" ]] || die "no $bin: run 'make venv' first (the mail server is the project's own)"
  mkdir -p "$VAR/mail" "$VAR/log"
  nohup "$bin" mail-server --host 127.0.0.1 --port "$MAIL_PORT" --dir "$VAR/mail" \
    >"$VAR/log/mail.log" 2>&1 &
  echo $! >"$VAR/mail/mail.pid"
  wait_port "$MAIL_PORT" 30 "mail server" || exit 1
  log "mail server up on $MAIL_PORT (messages in $VAR/mail/new)"
}

mail_down() {
  local pidf="$VAR/mail/mail.pid"
  if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
    kill "$(cat "$pidf")"
    rm -f "$pidf"
    log "mail server stopped"
  else
    log "mail server not running"
  fi
}

print_env() {
  cat <<EOF
export BILLING_DATABASE_URL=postgresql+asyncpg://$PG_USER@127.0.0.1:$PG_PORT/$PG_DB
export BILLING_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export BILLING_KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
export BILLING_STRIPE_MOCK_URL=http://127.0.0.1:$STRIPE_MOCK_PORT
export BILLING_NOTIFIER_SMTP_HOST=127.0.0.1
export BILLING_NOTIFIER_SMTP_PORT=$MAIL_PORT
EOF
}

status() {
  local name port
  for name in postgres:$PG_PORT redis:$REDIS_PORT kafka:$KAFKA_PORT stripe-mock:$STRIPE_MOCK_PORT mail:$MAIL_PORT; do
    port="${name#*:}"
    if port_open "$port"; then echo "${name%%:*}: up ($port)"; else echo "${name%%:*}: down"; fi
  done
}

cmd="${1:-up}"
case "$cmd" in
  up)
    pg_up
    redis_up
    kafka_up
    stripe_mock_up
    mail_up
    echo "PostgreSQL: postgresql://$PG_USER@127.0.0.1:$PG_PORT/$PG_DB"
    echo "Redis:      redis://127.0.0.1:$REDIS_PORT/0"
    echo "Kafka:      127.0.0.1:$KAFKA_PORT"
    echo "stripe-mock: http://127.0.0.1:$STRIPE_MOCK_PORT"
    echo "SMTP:       127.0.0.1:$MAIL_PORT (received mail: $VAR/mail/new/*.eml)"
    ;;
  down) mail_down; stripe_mock_down; kafka_down; redis_down; pg_down ;;
  status) status ;;
  env) print_env ;;
  start | stop)
    svc="${2:?name one of postgres, redis, kafka, stripe-mock, mail}"
    case "$svc" in
      postgres) if [[ $cmd == start ]]; then pg_up; else pg_down; fi ;;
      redis) if [[ $cmd == start ]]; then redis_up; else redis_down; fi ;;
      kafka) if [[ $cmd == start ]]; then kafka_up; else kafka_down; fi ;;
      stripe-mock) if [[ $cmd == start ]]; then stripe_mock_up; else stripe_mock_down; fi ;;
      mail) if [[ $cmd == start ]]; then mail_up; else mail_down; fi ;;
      *) die "unknown service $svc" ;;
    esac
    ;;
  *) die "usage: $0 up|down|status|env|start NAME|stop NAME" ;;
esac
