#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Copies the latest checkpoint of a process to another machine, or to a
# local directory. Images are plain directories, so rsync copies them
# whole; latest always names a published one.
#
#   rsync-backup.sh PID DEST       e.g. rsync-backup.sh 1234 backup:/ckpt/
#
# Restore it there with:  phos restore /ckpt/1234-<name>
set -eu
pid=$1 dest=$2
mnt=${PHOS_MOUNT:-/phos}
name=$(readlink "$mnt/$pid/checkpoints/latest") || {
	echo "rsync-backup: process $pid has no checkpoint" >&2
	exit 1
}
rsync -a --partial --mkpath "$mnt/$pid/checkpoints/$name/" "$dest/$pid-$name/"
echo "$dest/$pid-$name"
