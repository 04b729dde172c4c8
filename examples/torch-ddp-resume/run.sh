# The startup command of every kernel (a batch session with --success all and
# --dist-env per-container): writes train.py (its copy below) and runs it on the checkpoint
# folder, the data folder mounted at /home/work/$1 (default: ckpt).
#   troupe session create NAME --image troupe/pytorch:0.1.0 --cluster-size 3 --type batch \
#     --dist-env per-container --success all --max-restarts 2 --mount ckpt \
#     --startup-command "$(cat examples/torch-ddp-resume/run.sh)"
set -eu
prog=/tmp/resume-train.py
cat > "$prog" <<'PY'
@TRAIN_PY@
PY
OMP_NUM_THREADS=1 exec python "$prog" "/home/work/${CKPT_FOLDER:-ckpt}"
