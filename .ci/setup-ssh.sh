#!/usr/bin/env bash
# CI: install the OpenSSH server and client that the SSH executor tests start on 127.0.0.1
# (tests/sshd_fixture.py; without them those tests skip). Safe to run again.
set -euo pipefail
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends openssh-server openssh-client
