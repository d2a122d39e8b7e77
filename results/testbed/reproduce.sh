#!/usr/bin/env bash
# The commands that made results/testbed (steps 3 to 5 of results/study-log.md), one heavy job at
# a time on a 2-core machine: the recipe's base pretrained with its checkpoints at steps 3000, 6000, 9000
# kept, the second pretraining seed likewise, the regime study (from the step-9000 checkpoint),
# the sweep's studies from the other checkpoints and the final base, and the sweep. Every step resumes unit by unit, so after an interruption run this again:
#
#     bash results/testbed/reproduce.sh            # RUNS=runs by default
#
# The checkpoints exist only if calibration_curve.py watched the pretraining as it ran; a folder
# whose base finished without them cannot make them again (pretrain it anew in another folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-runs}
STUDY="passkt study run"
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
[ -f "$D/profile.json" ] || $STUDY --stage splits --profile regime --out "$D" \
    --set 'eval.floor_pretrain_seeds=[]'
if [ ! -f "$D/base/done.json" ]; then
    mkdir -p "$D/base"
    $STUDY --stage base --out "$D" --threads 2 &
    pretraining=$!
    python -m passkt.study.calibration_curve "$D/base" --out "$RUNS/cal/d" --every 3000 \
        --categories C,A --n 16 --limit 100
    wait $pretraining
fi
$STUDY --stage eval-base --out "$D" --jobs 2

# 3b. The second pretraining seed of the recipe, base-p1 (eval.floor_pretrain_seeds), with its
#     checkpoints at the same steps kept beside it: the regime study's base is the recipe's
#     step-9000 checkpoint (nearest the bridge targets, its CIs overlapping both; the final base
#     is above both), so its pretraining floor is base-p1's step-9000 checkpoint.
if [ ! -f "$D/base-p1/done.json" ]; then
    mkdir -p "$D/base-p1"
    $STUDY --stage base --profile regime --out "$D" --threads 2 &
    pretraining=$!
    python -m passkt.study.calibration_curve "$D/base-p1" --out "$RUNS/cal/d-p1" \
        --every 3000 --categories C,A --n 16 --limit 100
    wait $pretraining
fi

# 4. The studies of the checkpoints: the same recipe from each, each with the second pretraining
#    seed's checkpoint of the same step in its floor. Step 9000 is the regime study (every
#    category and training seed); steps 6000 and 3000 are the sweep's weaker bases (math and
#    bridge, training seed 0). A folder made before its floor named base-p1 (an evaluation floor
#    only) takes the new floor: its base-p1 evaluations are added, compare and report made again.
mkdir -p "$RUNS/profiles"
for s in 9000 6000 3000; do
    profile=$RUNS/profiles/regime-d$s.toml
    sed -e "s|^pretrain = .*|model = \"$RUNS/cal/d/model-$s\"|" \
        -e "s|^name = .*|name = \"regime-d$s\"|" \
        study/profiles/regime.toml > "$profile"
    floor="base.floor_models={1 = \"$RUNS/cal/d-p1/model-$s\"}"
    if [ "$s" = 9000 ]; then
        $STUDY --profile "$profile" --out "$RUNS/regime-d$s" --jobs 2 --set "$floor"
    else
        $STUDY --profile "$profile" --out "$RUNS/regime-d$s" --categories A,C --seeds 0 \
            --jobs 2 --set "$floor" --set "eval.n_per_category=${N_PER_CATEGORY[$s]}"
    fi
done

# 5. The final base (step 12,000) as the sweep's strongest point: math and bridge, seed 0.
$STUDY --profile regime --out "$D" --categories A,C --seeds 0 --jobs 2

passkt study sweep "${SNAPSHOTS[@]/#/$RUNS/regime-d}" "$D" --out "$RUNS/sweep"
