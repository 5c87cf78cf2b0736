#!/usr/bin/env bash
# Installs the peers that bench/run.py measures tidings against. Run as root; safe to run again.
#
#   * Debian packages mosquitto and nats-server. Their distro services must not start (the bench
#     runs its own copies bound to 127.0.0.1, pinned to CPU 0), so unless the machine already has a
#     /usr/sbin/policy-rc.d we install one that forbids service starts for the duration of the
#     install and remove it afterwards.
#   * amqtt (pure-Python MQTT broker) and py-spy from PyPI into a separate venv, so that amqtt's
#     dependencies never touch the project venv. The venv lives in the bench work dir
#     ($TIDINGS_BENCH_DIR, default /tmp/tidings-bench), outside the repository.
#
# PYTHON chooses the interpreter for that venv (default python3, 3.10 or newer).
set -euo pipefail

WORK=${TIDINGS_BENCH_DIR:-/tmp/tidings-bench}
VENV=$WORK/venv-peers
PKGS=(mosquitto nats-server)
AMQTT_VERSION=${AMQTT_VERSION:-0.12.1}

if [ "$(id -u)" -ne 0 ]; then
  echo "bench/setup.sh: run as root (it uses apt-get)" >&2
  exit 1
fi
mkdir -p "$WORK"
chmod 755 "$WORK"  # mosquitto drops root privileges and must still reach its data dir below

policy=/usr/sbin/policy-rc.d
ours=0
restore_policy() { if [ "$ours" = 1 ]; then rm -f "$policy"; fi; }
trap restore_policy EXIT

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# tidings bench/setup.sh: no service starts during install\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    ours=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  echo "== apt-get update"
  apt-get update -q
  echo "== apt-get install ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  restore_policy
  ours=0
else
  echo "== Debian packages already installed: ${PKGS[*]}"
fi

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "bench/setup.sh: $PY is older than 3.10" >&2
  exit 1
}
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -m pip show -q amqtt 2>/dev/null \
    || ! "$VENV/bin/python" -m pip show -q py-spy 2>/dev/null; then
  echo "== pip install amqtt==$AMQTT_VERSION py-spy into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "amqtt==$AMQTT_VERSION" py-spy
fi

echo "== versions"
dpkg-query -W -f '   ${Package} ${Version}\n' "${PKGS[@]}"
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(amqtt|py-spy) ' \
  | sed 's/^/   /'
busy=""
for port in 1883 1884 4222; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then busy="$busy $port"; fi
done
if [ -n "$busy" ]; then
  echo "!! something already listens on 127.0.0.1:$busy; bench/run.py picks free ports anyway," \
       "but a running distro broker competes for the CPU" >&2
fi
echo "== ready; work dir $WORK (run: python bench/run.py)"
