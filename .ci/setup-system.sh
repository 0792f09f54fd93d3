#!/usr/bin/env bash
# CI: the system tools some tests use for real (they skip, saying why, where these are missing):
# OpenSSH server and client (the SSH executor tests start sshd on 127.0.0.1), bubblewrap (the bash
# tool's sandbox), tmux (the real-terminal TUI test). Safe to run again.
set -euo pipefail
need=()
[ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || need+=(openssh-server openssh-client)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v tmux >/dev/null || need+=(tmux)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
