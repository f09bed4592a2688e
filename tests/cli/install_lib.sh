# install_lib.sh - shared by the install tests: a synth source in Hugging Face's path layout,
# servers on loopback (nginx, the fault-injecting server) and checks of an install against it.
# Sourced; expects $DF, $PYTHON, $DF_TEST_TMP. Servers are stopped on exit.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../lib.sh"
TOOLS="$HERE/../tools"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# make_source DIR [PRESET] [SEED]: DIR/www/moonshotai/Kimi-K3/resolve/main holds a synth checkpoint.
make_source() {
    SRC="$1/www/moonshotai/Kimi-K3/resolve/main"
    mkdir -p "$SRC"
    "$DF" synth --preset "${2:-small}" --seed "${3:-7}" --out "$SRC" --quiet >/dev/null
}

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() { # port
    for _ in $(seq 100); do
        "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "nothing listens on port $1"
}

# start_nginx WWW [CONFIG]: serves WWW on a free loopback port (CONFIG: more lines for its server
# block); sets PORT and K3_HF_HOST.
start_nginx() {
    local www="$1" extra="${2:-}" conf="$DF_TEST_TMP/nginx"
    mkdir -p "$conf"
    PORT=$(free_port)
    cat >"$conf/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $conf/nginx.pid;
error_log $conf/error.log;
events { worker_connections 256; }
http {
    access_log $conf/access.log;
    client_body_temp_path $conf/tmp;
    proxy_temp_path $conf/tmp;
    fastcgi_temp_path $conf/tmp;
    uwsgi_temp_path $conf/tmp;
    scgi_temp_path $conf/tmp;
    sendfile on;
    keepalive_requests 100000;
    server { listen 127.0.0.1:$PORT; root $www; $extra }
}
CONF
    /usr/sbin/nginx -c "$conf/nginx.conf" -p "$conf" 2>"$conf/stderr" &
    PIDS+=($!)
    wait_port "$PORT"
    export K3_HF_HOST="http://127.0.0.1:$PORT"
}

# start_faults WWW_SOURCE_DIR [faultserver options]: sets PORT, K3_HF_HOST, FLOG (request log);
# FAULT_PORT picks the port.
start_faults() {
    local src="$1"; shift
    local pf="$DF_TEST_TMP/port.$RANDOM$RANDOM"
    FLOG="$DF_TEST_TMP/faults.$RANDOM.log"
    : >"$FLOG"
    "$PYTHON" "$TOOLS/faultserver.py" --dir "$src" --port-file "$pf" --log "$FLOG" --port "${FAULT_PORT:-0}" "$@" &
    FPID=$!
    PIDS+=($FPID)
    for _ in $(seq 100); do [ -f "$pf" ] && break; sleep 0.05; done
    [ -f "$pf" ] || fail "fault server did not start"
    PORT=$(cat "$pf")
    export K3_HF_HOST="http://127.0.0.1:$PORT"
}
stop_faults() { kill "$FPID" 2>/dev/null || true; wait "$FPID" 2>/dev/null || true; }
# restart_faults WWW_SOURCE_DIR [options]: the server again on the same port (the same mirror URL)
restart_faults() { stop_faults; FAULT_PORT=$PORT start_faults "$@"; }

# check_install ROOT [--full]: every recorded byte equals the source (and, --full, every file).
check_install() { "$PYTHON" "$TOOLS/check_install.py" "$1" "$SRC" "${@:2}"; }

# Quick retries and timeouts so fault tests take seconds.
export K3_FETCH_BACKOFF_MS=50 K3_FETCH_STALL_TIMEOUT=2 K3_FETCH_CONNECT_TIMEOUT=5
unset K3_HF_PATH K3_HF_REVISION HF_TOKEN DELTAFIN_ROOT K3_DISK_FREE_BYTES
