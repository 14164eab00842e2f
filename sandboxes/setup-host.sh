#!/usr/bin/env bash
# Prepares a Debian/Ubuntu host for taskforge sandboxes: a Docker engine (installed and started
# if absent) and debootstrap for the offline base image. Idempotent; run as root.
set -euo pipefail

log() { echo "setup-host: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    log "installing ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
        log "starting docker.service"
        $SUDO systemctl start docker
    else
        log "starting dockerd (log: /var/log/taskforge-dockerd.log)"
        $SUDO sh -c 'nohup dockerd >/var/log/taskforge-dockerd.log 2>&1 &'
    fi
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/taskforge-dockerd.log"; exit 1; }
fi
log "docker engine $(docker version --format '{{.Server.Version}}') is running"
