#!/usr/bin/env bash
# The package as a user installs it: build the sdist and the wheel (the wheel from the sdist, so
# the sdist must carry configs/ and slurm_templates/), check their metadata and that the wheel
# holds no test-only code, install the wheel into a fresh virtualenv outside the checkout and run
# the CLI there: presets, plan, render, tasks list, site detect (and submit --dry-run on its
# profile, where a SLURM answers), a run with the fake engine and its report. Then the checkout
# installed editable (pip install -e) answers from outside it too.
#
#   scripts/check-wheel.sh            # under a minute; scripts/test.sh runs it
#
# A fresh virtualenv (--without-pip: the test environment's pip installs into it) gets no
# packages of its own but evalpipe (--no-deps); a .pth file lets it see the test environment's
# site-packages (pyyaml, jinja2, pandas, setuptools, ...) behind its own, so nothing is
# downloaded. A plain path in a .pth file is not processed further, so the test environment's
# own editable install of evalpipe stays invisible.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PYTHON=${PYTHON:-python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/evalpipe-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say() { printf 'check-wheel: %s\n' "$*"; }
die() {
    printf 'check-wheel: FAILED: %s\n' "$*" >&2
    exit 1
}

say "building the sdist and, from it, the wheel"
# The sdist step writes evalpipe.egg-info into the checkout; leave the checkout as it was.
[ -e evalpipe.egg-info ] && had_egg_info=1 || had_egg_info=0
"$PYTHON" -m build --no-isolation --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 ||
    { cat "$WORK/build.log" >&2; die "python -m build"; }
[ "$had_egg_info" = 1 ] || rm -rf evalpipe.egg-info
"$PYTHON" -m twine check --strict "$WORK"/dist/*.tar.gz "$WORK"/dist/*.whl

# Every tracked module, config file and template must be in both archives.
"$PYTHON" - "$WORK/dist" <<'EOF'
import subprocess, sys, tarfile, zipfile
from pathlib import Path

dist = Path(sys.argv[1])
tracked = subprocess.run(
    ["git", "ls-files", "evalpipe", "configs", "slurm_templates"],
    capture_output=True, text=True, check=True,
).stdout.split()
wanted = [p for p in tracked if p.endswith((".py", ".yaml", ".j2"))]
(sdist,) = dist.glob("*.tar.gz")
(wheel,) = dist.glob("*.whl")
with tarfile.open(sdist) as tar:
    in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
in_wheel = set(zipfile.ZipFile(wheel).namelist())
as_installed = {p: p if p.startswith("evalpipe/") else f"evalpipe/{p}" for p in wanted}
missing = [f"sdist: {p}" for p in wanted if p not in in_sdist]
missing += [f"wheel: {w}" for w in as_installed.values() if w not in in_wheel]
if missing:
    sys.exit("missing from the archives (pyproject.toml packages/package-data):\n  "
             + "\n  ".join(missing))
print(f"check-wheel: {len(wanted)} modules, configs and templates in the sdist and the wheel")
# What users install holds no test-only code: fixtures live under tests/, and no module reads a
# fault-injection variable (tests inject faults from outside, e.g. tests/slow_replace.py).
with zipfile.ZipFile(wheel) as zf:
    modules = [n for n in zf.namelist() if n.endswith(".py")]
    test_only = [n for n in modules if Path(n).stem.startswith(("synthetic", "test_", "conftest"))]
    test_only += [n for n in modules if b"EVALPIPE_TEST_" in zf.read(n)]
if test_only:
    sys.exit("test-only code in the wheel (move it under tests/):\n  " + "\n  ".join(test_only))
print(f"check-wheel: no test-only code among the wheel's {len(modules)} modules")
EOF

SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
fresh_venv() { # fresh_venv DIR: prints its site-packages
    "$PYTHON" -m venv --without-pip "$1"
    local site
    site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$SITE" >"$site/evalpipe-test-env.pth"
    echo "$site"
}

say "installing the wheel into a fresh virtualenv in $WORK"
VSITE=$(fresh_venv "$WORK/venv")
"$PYTHON" -m pip --python "$WORK/venv/bin/python" install -q --no-deps --no-index "$WORK"/dist/*.whl

# Outside the checkout, with nothing pointing back into it.
cd "$WORK"
unset PYTHONPATH EVALPIPE_CONFIG_DIR EVALPIPE_TEMPLATE_DIR EVALPIPE_CONFIG_PATH
export PATH="$WORK/venv/bin:$PATH"
where=$(python -c 'import evalpipe; print(evalpipe.__file__)')
case $where in
"$VSITE"/*) ;;
*) die "evalpipe imported from $where, not from the wheel in $VSITE" ;;
esac

expect() { # expect NAME TEXT FILE: FILE holds TEXT
    grep -qF -- "$2" "$3" || {
        cat "$3" >&2
        die "$1: output lacks '$2'"
    }
}

evalpipe presets --json >presets.json
shipped=$(find "$REPO/configs/presets" -name '*.yaml' | wc -l)
listed=$(python -c 'import json; print(len(json.load(open("presets.json"))))')
[ "$listed" = "$shipped" ] || die "evalpipe presets lists $listed presets, the checkout has $shipped"

evalpipe plan --preset falcon_40b --gpu a100-40gb >plan.txt
expect plan "falcon_40b" plan.txt
evalpipe render --preset tiny_random --cluster local --out "$WORK/run" >job.sbatch
expect render "#SBATCH --partition=local" job.sbatch
expect render "--preset tiny_random" job.sbatch
evalpipe tasks list >tasks.txt
for task in "$REPO"/configs/tasks/*.yaml "$REPO"/configs/suites/*.yaml; do
    expect "tasks list" "$(basename "$task" .yaml)" tasks.txt
done
evalpipe site detect --help >site.txt
expect "site detect --help" "--partition" site.txt
if scontrol ping >/dev/null 2>&1; then # where a SLURM answers (scripts/local-slurm.sh start)
    evalpipe site detect -o mysite.yaml >/dev/null 2>&1
    # --no-check: this checks the packaging, not whether a model is prepared on this machine.
    evalpipe submit --preset tiny_random --cluster mysite.yaml --dry-run --no-check >submit.txt
    expect "submit --dry-run with the detected profile" "#SBATCH --gres=gpu:" submit.txt
fi

evalpipe run --preset tiny_random --backend fake --categories math --limit 3 --out "$WORK/run" >run.txt 2>&1 ||
    { cat run.txt >&2; die "evalpipe run"; }
evalpipe report "$WORK/run" >report.txt
expect report "tiny_random" report.txt
say "ok: the wheel plans, renders, lists, runs and reports outside the checkout"

say "installing the checkout editable into another fresh virtualenv"
fresh_venv "$WORK/editable" >/dev/null
"$PYTHON" -m pip --python "$WORK/editable/bin/python" install -q --no-deps --no-build-isolation \
    -e "$REPO" >"$WORK/editable.log" 2>&1 || { cat "$WORK/editable.log" >&2; die "pip install -e"; }
"$WORK/editable/bin/evalpipe" render --preset tiny_random --cluster local --out "$WORK/run2" \
    >editable.sbatch 2>/dev/null
expect "editable render" "#SBATCH --partition=local" editable.sbatch
"$WORK/editable/bin/evalpipe" tasks list >editable-tasks.txt
expect "editable tasks list" "gsm8k" editable-tasks.txt
say "ok: the editable install finds the checkout's configs and templates"
