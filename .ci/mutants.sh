#!/usr/bin/env bash
# Mutation testing (issue 15), not part of `make test`: `make mutants`, or
#   .ci/mutants.sh [AREA...]        areas: see AREAS below; none given = all of them
# Each area runs mutmut 3 (configured in setup.cfg) over its modules with only its tests,
# in a scratch copy of the working tree (tracked and untracked, not ignored, files), so the
# checkout never gets a mutants/ folder and others' edits during the run do not matter.
# Prints each area's score and writes it to $MUTANTS_DIR/<area>/score.txt; the surviving
# mutants are listed there too (survivors.txt). tests/MUTATION.md records the last scores and
# why each surviving mutant that no test can kill is equivalent.
#
# Environment: MUTANTS_DIR (scratch, default ${TMPDIR:-/tmp}/feedline-mutants),
# MUTANTS_JOBS (parallel mutants, default 1: the machine is shared), MUTANTS_FROM (worktree,
# the default, or HEAD: the last commit, unaffected by edits in progress), PY (the venv's python),
# MUTANTS_SAMPLE (mutmut name patterns, e.g. '*_mutmut_*[147]': only the mutants they match run,
# a stated sample for an area whose full run takes hours; the score counts the mutants run).
set -euo pipefail
# The whole script is one block, read before it runs: editing it during a run is safe.
{
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
MUTMUT=$(dirname "$PY")/mutmut
WORK=${MUTANTS_DIR:-${TMPDIR:-/tmp}/feedline-mutants}
JOBS=${MUTANTS_JOBS:-1}

# area -> "modules to mutate (globs) | tests to run". The CUDA Finisher, the GPU decoder
# and DALI's graph are left out: without a GPU no test reaches them (make gpu-check does).
LOADER_TESTS="tests/test_loader.py tests/test_loader_oracles.py tests/test_loader_options.py tests/test_loader_resume.py
              tests/test_loader_quasi_random.py tests/test_ledger.py tests/test_sources_ledger.py
              tests/test_fill.py"
declare -A AREAS=(
  [order]="feedline/planning/order.py | tests/test_order.py tests/test_properties.py"
  [augment]="feedline/planning/augment.py | tests/test_augment.py tests/test_properties.py"
  [substitute]="feedline/sources/substitute.py | tests/test_substitute.py tests/test_properties.py"
  [plan]="feedline/planning/plan.py | tests/test_properties.py $LOADER_TESTS"
  [loader]="feedline/loading/loader.py feedline/core/ledger.py | $LOADER_TESTS"
  [sources]="feedline/sources/fill.py feedline/sources/worker_loop.py feedline/sources/dispatch.py
             feedline/sources/cpu_engine.py feedline/sources/feed.py
             feedline/sources/policy.py feedline/sources/normalization.py
             feedline/sources/ring.py feedline/sources/slot.py feedline/sources/rows.py
             feedline/sources/finisher.py |
             $LOADER_TESTS tests/test_cpu_engine.py tests/test_worker_loop.py tests/test_sources_feed.py
             tests/test_sources_host_output.py tests/test_slot.py tests/test_ring.py tests/test_rows.py
             tests/test_finisher.py tests/test_thread_workers.py
             tests/test_sources_policy.py tests/test_sources_policy_errors.py tests/test_normalize.py
             tests/test_dali_errors.py"
  [dali]="feedline/sources/dali.py feedline/sources/known_bad.py |
          tests/test_dali.py tests/test_sources_ledger.py tests/test_loader_oracles.py tests/test_dali_errors.py"
  [stores]="feedline/stores/base.py feedline/stores/lmdb_store.py feedline/stores/hdf5_store.py
            feedline/stores/folder_store.py feedline/stores/sharded_store.py feedline/stores/__init__.py |
            tests/test_stores.py tests/test_checksums.py tests/test_shards.py tests/test_readahead.py
            tests/test_info_verify.py tests/test_scan.py tests/test_loader_oracles.py tests/test_stores_base.py
            tests/test_open_dataset.py tests/test_folder_store.py tests/test_hdf5_store.py tests/test_lmdb_store.py
            tests/test_sharded_store.py"
  [journal]="converters/journal.py converters/packer.py converters/writer_base.py converters/lmdb_writer.py
             converters/hdf5_writer.py | tests/test_pack_resume.py tests/test_pack.py tests/test_disk_full.py
             tests/test_shards.py tests/test_ordered.py tests/test_hdf5_writer.py tests/test_hdf5_resume.py
             tests/test_lmdb_writer.py tests/test_lmdb_resume.py tests/test_packer.py tests/test_journal_resume.py"
  [verify]="feedline/dataset/verify.py | tests/test_info_verify.py tests/test_checksums.py tests/test_verify.py"
  [webdataset]="converters/webdataset.py | tests/test_webdataset.py tests/test_webdataset_members.py"
  [resume]="converters/shards.py converters/upload.py converters/complete.py converters/writers.py |
            tests/test_shards.py tests/test_shards_resume.py tests/test_upload.py tests/test_pack_resume.py
            tests/test_journal_resume.py tests/test_writers.py tests/test_complete.py"
  [lamb]="feedline/train/lamb.py | tests/test_train_lamb.py tests/test_train_flags.py tests/test_train_step.py"
  [train-eval]="feedline/train/evaluate.py feedline/train/evaluate_targets.py feedline/train/task.py |
                tests/test_train_evaluate.py tests/test_train_evaluate_targets.py tests/test_train_task.py
                tests/test_train_targets.py tests/test_train_recipe.py tests/test_train.py"
)
ORDER=(order augment substitute plan loader sources dali stores journal verify webdataset resume lamb train-eval)

if [[ ! -x $MUTMUT ]]; then
  echo "mutants: $MUTMUT not found; install it: $PY -m pip install 'mutmut>=3.8,<4'" >&2
  exit 2
fi
areas=("$@")
[[ ${#areas[@]} -gt 0 ]] || areas=("${ORDER[@]}")
for area in "${areas[@]}"; do
  [[ -n ${AREAS[$area]+x} ]] || { echo "mutants: unknown area '$area' (known: ${ORDER[*]})" >&2; exit 2; }
done

status=0
for area in "${areas[@]}"; do
  spec=${AREAS[$area]}
  modules=${spec%%|*}
  tests=${spec#*|}
  dir=$WORK/$area
  rm -rf "$dir" && mkdir -p "$dir"
  if [[ ${MUTANTS_FROM:-worktree} == HEAD ]]; then
    git -C "$ROOT" archive HEAD | tar -C "$dir" -xf -
  else  # tracked and untracked files, less those deleted in the working tree
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
       | "$PY" -c 'import os, sys; sys.stdout.write("".join(p + "\0" for p in sys.stdin.read().split("\0") if p and os.path.lexists(p)))' \
       | tar --null -T - -cf -) | tar -C "$dir" -xf -
  fi
  # The area's modules and tests, added to the [mutmut] section of the copy's setup.cfg.
  "$PY" - "$dir/setup.cfg" "$modules" "$tests" <<'EOF'
import configparser, sys
path, modules, tests = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
cfg = configparser.ConfigParser()
cfg.read(path)
cfg["mutmut"]["only_mutate"] = "\n" + "\n".join(modules)
cfg["mutmut"]["pytest_add_cli_args_test_selection"] = "\n" + "\n".join(tests)
with open(path, "w") as f:
    cfg.write(f)
EOF
  echo "== mutants: $area: mutating" $modules "with" $tests
  read -r -a sample <<< "${MUTANTS_SAMPLE:-}"
  (cd "$dir" && FEEDLINE_MUTATION=1 nice -n 10 "$MUTMUT" run --max-children "$JOBS" "${sample[@]}" > run.log 2>&1) || {
    echo "mutants: mutmut failed for $area, see $dir/run.log" >&2; tail -20 "$dir/run.log" >&2; status=1; continue; }
  (cd "$dir" && "$MUTMUT" export-cicd-stats > /dev/null 2>&1 && "$MUTMUT" results > survivors.txt 2>&1) || true
  "$PY" - "$dir" "$area" <<'EOF'
import json, sys
from collections import Counter
from pathlib import Path
folder, area = Path(sys.argv[1]), sys.argv[2]
# mutmut's exit codes (mutmut/stats.py): 1, 3 killed; 0 survived; 5, 33 no tests; SIGXCPU timeout.
# A test process killed by SIGBUS/SIGSEGV/SIGABRT (mutmut: "suspicious") crashed on the mutant:
# killed, like a timeout (e.g. a weakened length check lets a truncated LMDB file be mapped).
KIND = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
        -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", 36: "timeout",
        -7: "crash", -11: "crash", -6: "crash"}
lines = []
for meta in sorted((folder / "mutants").rglob("*.py.meta")):
    codes = [c for c in json.loads(meta.read_text())["exit_code_by_key"].values() if c is not None]  # None: not run
    if not codes:
        continue
    c = Counter(KIND.get(code, "other") for code in codes)
    killed = c["killed"] + c["timeout"] + c["crash"]
    module = str(meta.relative_to(folder / "mutants"))[:-len(".meta")]
    lines.append(f"{area}: {module}: killed {killed} / {len(codes)} ({100 * killed / len(codes):.1f}%), "
                 f"survived {c['survived']}, no tests {c['no tests']}, timeout {c['timeout']}"
                 + (f", crash {c['crash']}" if c["crash"] else "") + (f", other {c['other']}" if c["other"] else ""))
print("\n".join(lines))
(folder / "score.txt").write_text("\n".join(lines) + "\n")
EOF
  sed 's/^/    /' "$dir/survivors.txt"
done
exit $status
}
