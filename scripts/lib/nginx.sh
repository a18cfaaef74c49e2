# shellcheck shell=bash
# A private nginx for the network benchmarks: the part that scripts/bench-net.sh
# and scripts/bench-profile.sh share. Each sources it, relative to its own folder:
#
#   . "$(dirname "$0")/lib/nginx.sh"
#
# Sourcing it only defines the functions below (prefix weft_nginx_); nothing
# runs and no variable is set until a function is called. The messages stay in
# the scripts (each says "skipped" in its own words): these functions only
# return a status, except weft_nginx_logs, which prints nginx's own.
#
#   weft_nginx_bin            the nginx to run: $NGINX, default /usr/sbin/nginx
#                             (Debian's nginx-light; scripts/deps.sh bench installs it)
#   weft_nginx_free_port [--python3-only]
#                             prints a port of 127.0.0.1 that nothing listens on now
#   weft_nginx_start NGINX DIR PORT CONNS
#                             writes DIR/www/page (9216 bytes, the size of weft-bench's
#                             own page) and DIR/nginx.conf, and starts NGINX on
#                             127.0.0.1:PORT in the foreground of a background job;
#                             its pid in weft_nginx_pid
#   weft_nginx_wait_port PORT status 0 once 127.0.0.1:PORT accepts connections (at most 10 s)
#   weft_nginx_logs DIR       nginx's output and error log, on stderr (why it did not start)
#   weft_nginx_stop           kills and reaps weft_nginx_pid, if any
#
# DIR is the script's fresh temporary folder (mktemp -d): the page, the config,
# the pid file, the logs and nginx's temporary paths all go there, so removing
# it at exit removes everything; the system's nginx service, if any, is neither
# used nor touched. The caller sets weft_nginx_pid= before its exit trap (so
# that a stray environment variable is never killed) and kills the pid at exit:
# bench-profile.sh with weft_nginx_stop, bench-net.sh in its own loop beside
# the weft-bench servers (all killed first, then all reaped).
#
# How the two use it: bench-net.sh with CONNS its --connections, the free port
# with its fallback, and then its own check that /page is the 9216-byte page;
# bench-profile.sh with CONNS 1000 (its connections) and python3's port only.
# Both print weft_nginx_logs when nginx does not come up.

# The nginx to run.
weft_nginx_bin() { echo "${NGINX:-/usr/sbin/nginx}"; }

# A port that nothing listens on now (the kernel's pick for port 0, then released). Without
# python3, a random port in 20000-59999 that refuses connections (100 tries), unless
# --python3-only (bench-profile.sh's way: it has always needed python3 for the port).
# shellcheck disable=SC2120 # --python3-only is optional: bench-net.sh passes no argument
weft_nginx_free_port() {
  if [ "${1:-}" = --python3-only ] || command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  return 1
}

# Start nginx (args: nginx DIR PORT CONNS): one worker per CPU (nproc), sendfile,
# tcp_nopush, an open-file cache, keep-alive (1,000,000 requests, 60 s), no access
# log, descriptors and worker connections for CONNS connections. Not in a command
# substitution: the background job must be the calling shell's child, so that its
# exit trap can reap it.
weft_nginx_start() {
  local nginx_bin=$1 dir=$2 port=$3 conns=$4
  local temp_paths='' t nginx_build
  mkdir -p "$dir/www"
  head -c 9216 /dev/zero | tr '\0' x >"$dir/www/page"
  # nginx's workers run as an unprivileged user when it starts as root: let them read the page.
  chmod 0755 "$dir" "$dir/www"
  chmod 0644 "$dir/www/page"
  # The temporary paths compiled in (/var/lib/nginx/...) go into the folder too, for the modules
  # this nginx has, so that nothing outside it is written or needed.
  nginx_build=$("$nginx_bin" -V 2>&1)
  for t in client_body fastcgi proxy scgi uwsgi; do
    case "$nginx_build" in *"--http-${t/_/-}-temp-path"*) temp_paths+="  ${t}_temp_path $dir/${t}_temp;"$'\n' ;; esac
  done
  cat >"$dir/nginx.conf" <<EOF
# Written by scripts/${0##*/}; removed at its exit.
worker_processes $(nproc);
worker_rlimit_nofile $((4 * conns + 1024));
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;

events {
  worker_connections $((2 * conns + 1024));
}

http {
  default_type text/html;
  access_log off;
  sendfile on;
  tcp_nopush on;
  open_file_cache max=1000 inactive=60s;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
$temp_paths
  server {
    listen 127.0.0.1:$port backlog=4096;
    root $dir/www;
    location / { }
  }
}
EOF
  "$nginx_bin" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/nginx.out" 2>&1 &
  weft_nginx_pid=$!
}

# Wait until something accepts connections on 127.0.0.1:$1 (at most 10 s).
weft_nginx_wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# What nginx said (args: DIR), on stderr: after a start that did not come up. Standard output
# goes to stderr first and only then cat's own stderr to /dev/null (a missing log is no error):
# the other order would send both to /dev/null.
weft_nginx_logs() {
  cat "$1/nginx.out" "$1/error.log" >&2 2>/dev/null || true
}

# Kill nginx and reap it (its master stops its workers), if it was started.
weft_nginx_stop() {
  [ -n "${weft_nginx_pid:-}" ] || return 0
  kill "$weft_nginx_pid" 2>/dev/null || true
  wait "$weft_nginx_pid" 2>/dev/null || true
  weft_nginx_pid=
}
