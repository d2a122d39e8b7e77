#!/usr/bin/env bash
# Issue 16, steps 3 to 4 of benchmarks/paper/README.md ("Issue 16"), one heavy job at a time on
# the 2-core machine: the regime study, the sweep's bases (checkpoints of the regime base's own
# pretraining at steps 3000, 6000, 9000) and their studies, the second pretraining seed, and the
# sweep. Every step resumes unit by unit, so after an interruption run this again:
#
#     bash benchmarks/paper/issue16.sh            # RUNS=runs by default
#
# The checkpoints exist only if calibration_curve.py watched the pretraining as it ran; a folder
# whose base finished without them cannot make them again (pretrain it anew in another folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-runs}
STUDY="python benchmarks/paper/study.py"
D=$RUNS/regime-d
SNAPSHOTS=(3000 6000 9000)

# n per category of each sweep base: 128 where its quick curve (n = 16) put pass@1 below 0.05,
# decided from runs/cal/d/curve.md before anything was trained from it.
declare -A N_PER_CATEGORY=(
    [3000]='{A = 128, C = 128}'
    [6000]='{}'
    [9000]='{}'
)

# 3. The study (the second pretraining seed joins in 3b); beside the base's pretraining, keep
#    its checkpoints at the snapshot steps with a quick curve of each.
[ -f "$D/profile.json" ] || $STUDY splits --profile regime --out "$D" \
    --set 'eval.floor_pretrain_seeds=[]'
if [ ! -f "$D/base/done.json" ]; then
    $STUDY base --out "$D" --threads 2 &
    python benchmarks/paper/calibration_curve.py "$D/base" --out "$RUNS/cal/d" --every 3000 \
        --categories C,A --n 16 --limit 100
    wait
fi
$STUDY eval-base --out "$D" --jobs 2

# 4. The sweep's studies: the same recipe from the earlier checkpoints, math and bridge, seed 0.
mkdir -p "$RUNS/profiles"
for s in 9000 6000 3000; do  # the base closest to the regime first
    profile=$RUNS/profiles/regime-d$s.toml
    sed -e "s|^pretrain = .*|model = \"$RUNS/cal/d/model-$s\"|" \
        -e "s|^name = .*|name = \"regime-d$s\"|" \
        benchmarks/paper/profiles/regime.toml > "$profile"
    $STUDY all --profile "$profile" --out "$RUNS/regime-d$s" --categories A,C --seeds 0 \
        --jobs 2 --set 'eval.floor_pretrain_seeds=[]' \
        --set "eval.n_per_category=${N_PER_CATEGORY[$s]}"
done

# 3. (continued) The regime study from its final base.
$STUDY all --out "$D" --jobs 2

# 3b. The second pretraining seed (the profile's eval.floor_pretrain_seeds): base-p1 pretrained
#     and evaluated twice; every comparison and the report made again with four base evaluations.
$STUDY base --profile regime --out "$D" --threads 2
$STUDY all --profile regime --out "$D" --jobs 2

python benchmarks/paper/sweep.py "${SNAPSHOTS[@]/#/$RUNS/regime-d}" "$D" --out "$RUNS/sweep"
