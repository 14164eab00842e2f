#!/usr/bin/env bash
# Builds the offline base root filesystem for taskforge sandboxes and streams it to stdout as a tar.
#
# Usage: build-rootfs.sh SUITE MIRROR > rootfs.tar
#
# The image holds only what every repository's environment needs: python3 with venv, git, and an
# unprivileged user. Repository code never goes into it; it is copied in at run time.
set -euo pipefail
suite=${1:?suite}
mirror=${2:?mirror}
root=$(mktemp -d /var/tmp/taskforge-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT

# Debian splits parts of CPython's standard library into separate packages; a suite must see the
# whole stdlib (tkinter, dbm, distutils, lib2to3) and the tz database, as on a usual host.
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-tk,python3-gdbm,python3-distutils,python3-lib2to3,tzdata,git,ca-certificates \
    "$suite" "$root" "$mirror" >&2

# The unprivileged user every sandbox runs as. uid 10001 matches sandboxes/security.toml.
echo 'sandbox:x:10001:10001:taskforge sandbox:/home/sandbox:/bin/sh' >> "$root/etc/passwd"
echo 'sandbox:x:10001:' >> "$root/etc/group"
echo 'sandbox:!:19000:0:99999:7:::' >> "$root/etc/shadow"
mkdir -p "$root/workspace" "$root/home/sandbox" "$root/opt"
chown 10001:10001 "$root/workspace" "$root/home/sandbox"

# Nothing an agent could mine for hints: package caches, docs, man pages.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*

tar --numeric-owner -C "$root" -c .
