# A Docker daemon for scripts/image and scripts/test-image, sourced by them (bash).
#
#   docker_install          docker.io and mmdebstrap from apt-get when missing
#   docker_start            uses the daemon that answers (DOCKER_HOST, or the default socket);
#                           else starts dockerd on a socket and data root of its own (data under
#                           target/docker/data, so images stay between runs) and stops it when
#                           the calling script exits, putting back the host's iptables rules,
#                           ip_forward and bridges as they were before it started
#   docker_cmd ARGS...      Debian's client (/usr/bin/docker) with BuildKit on
#
# Only one daemon of ours runs at a time on a machine (a lock in /tmp): two would fight over
# docker0 and the iptables chains.

STARLING_DOCKER_CLIENT=/usr/bin/docker
export DOCKER_BUILDKIT=1

docker_sudo() {
  if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi
}

docker_install() {
  local missing=()
  [ -x /usr/bin/docker ] && [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing missing system packages: ${missing[*]}"
    docker_sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive docker_sudo apt-get install -y -qq "${missing[@]}"
  fi
}

docker_cmd() {
  "$STARLING_DOCKER_CLIENT" "$@"
}

# Whether a daemon answers on the current DOCKER_HOST (or the default socket).
docker_answers() {
  timeout 10 "$STARLING_DOCKER_CLIENT" info >/dev/null 2>&1
}

# Sets STARLING_DOCKER_STARTED=1 when it started the daemon (then stopped on exit).
docker_start() {
  STARLING_DOCKER_STARTED=0
  if docker_answers; then
    echo "docker: using the daemon at ${DOCKER_HOST:-the default socket}" >&2
    return 0
  fi
  if [ -n "${DOCKER_HOST:-}" ]; then
    echo "docker: no daemon answers at DOCKER_HOST=$DOCKER_HOST" >&2
    return 1
  fi
  local root
  root="$(pwd)/target/docker"
  mkdir -p "$root/data"
  # The socket and the runtime state stay in a short path: a unix socket's path is limited to
  # 107 bytes, and containerd's live under the exec root.
  STARLING_DOCKER_RUN=$(mktemp -d /tmp/starling-docker.XXXXXX)
  exec 8>/tmp/starling-dockerd.lock
  if ! flock -w 600 8; then
    echo "docker: another of our daemons held /tmp/starling-dockerd.lock for 10 minutes" >&2
    return 1
  fi
  # What the daemon changes on the host, to put back when it stops.
  iptables-save >"$STARLING_DOCKER_RUN/iptables.before" 2>/dev/null || true
  cat /proc/sys/net/ipv4/ip_forward >"$STARLING_DOCKER_RUN/ip_forward.before"
  ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
    >"$STARLING_DOCKER_RUN/bridges.before"
  STARLING_DOCKER_STARTED=1
  trap docker_stop EXIT
  # Its own pid file, socket, exec root and data root; nothing of a system daemon's is touched.
  dockerd --data-root "$root/data" --exec-root "$STARLING_DOCKER_RUN/exec" \
    --pidfile "$STARLING_DOCKER_RUN/dockerd.pid" -H "unix://$STARLING_DOCKER_RUN/docker.sock" \
    --storage-driver=overlay2 >"$root/dockerd.log" 2>&1 &
  STARLING_DOCKER_PID=$!
  export DOCKER_HOST="unix://$STARLING_DOCKER_RUN/docker.sock"
  local waited=0
  until docker_answers; do
    if ! kill -0 "$STARLING_DOCKER_PID" 2>/dev/null || [ "$waited" -ge 60 ]; then
      echo "docker: dockerd did not start (log: $root/dockerd.log):" >&2
      tail -n 20 "$root/dockerd.log" >&2
      return 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  echo "docker: started dockerd (pid $STARLING_DOCKER_PID, $DOCKER_HOST, data in $root/data)" >&2
}

# Stops the daemon docker_start started and puts the host's network settings back.
docker_stop() {
  local status=$?
  if [ "${STARLING_DOCKER_STARTED:-0}" != 1 ]; then return "$status"; fi
  STARLING_DOCKER_STARTED=0
  if kill -0 "$STARLING_DOCKER_PID" 2>/dev/null; then
    kill -TERM "$STARLING_DOCKER_PID"
    local waited=0
    while kill -0 "$STARLING_DOCKER_PID" 2>/dev/null && [ "$waited" -lt 60 ]; do
      sleep 0.5
      waited=$((waited + 1))
    done
    kill -KILL "$STARLING_DOCKER_PID" 2>/dev/null || true
    wait "$STARLING_DOCKER_PID" 2>/dev/null || true
  fi
  local run=$STARLING_DOCKER_RUN
  # iptables-restore replaces the tables the saved rules name; a table the daemon brought in
  # (nat, usually) is emptied and its chains deleted.
  if [ -s "$run/iptables.before" ]; then
    iptables-restore <"$run/iptables.before" || echo "docker: could not restore iptables" >&2
  fi
  for table in filter nat mangle raw; do
    if ! grep -q "^\*$table$" "$run/iptables.before" 2>/dev/null \
      && iptables -t "$table" -S >/dev/null 2>&1; then
      iptables -t "$table" -F && iptables -t "$table" -X || true
      for chain in $(iptables -t "$table" -S | awk '$1 == "-P" {print $2}'); do
        iptables -t "$table" -P "$chain" ACCEPT || true
      done
    fi
  done
  cat "$run/ip_forward.before" >/proc/sys/net/ipv4/ip_forward 2>/dev/null \
    || echo "docker: could not restore ip_forward" >&2
  for bridge in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
    if ! grep -qx "$bridge" "$run/bridges.before"; then
      ip link delete "$bridge" 2>/dev/null || true
    fi
  done
  rm -rf --one-file-system "$run"
  flock -u 8 2>/dev/null || true
  exec 8>&-
  echo "docker: stopped dockerd; iptables, ip_forward and bridges as before" >&2
  return "$status"
}
