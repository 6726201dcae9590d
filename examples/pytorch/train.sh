#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# A training job as clusters launch it: a shell script that sets up the
# environment and runs the trainer. Under `phos run -- ./train.sh`, the
# pid phos prints is this shell's, and a checkpoint of it takes the whole
# job: the shell, python, and python's DataLoader workers.
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
python3 "$here/train_loader.py" "$@"
echo "train.sh: trainer exited with status $?"
