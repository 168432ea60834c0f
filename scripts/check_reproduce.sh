#!/usr/bin/env bash
# `make check-reproduce`: rerun the studies (scripts/reproduce_all.sh; STUDIES= as there) and
# check that results/ is byte for byte what git holds: `git status --porcelain results/` must
# be empty afterwards (no file changed, none new, none gone), and every file git holds in a
# rerun study's folder must have been rewritten by the rerun (else it is stale: left by an
# earlier version of the study; README files, written by hand, excepted). Needs a clean
# results/ to start from (commit or restore first).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain -- results/)" ]; then
    echo "check_reproduce: results/ differs from git before the rerun; commit or restore it first:" >&2
    git status --short -- results/ >&2
    exit 1
fi
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
sleep 1  # a file written in the same second as the stamp still counts as newer
scripts/reproduce_all.sh
changed=$(git status --porcelain -- results/)
read -r -a studies <<< "${STUDIES:-preemption prefix_recovery victim_choice victim_policies sensitivity}"
stale=()
for s in "${studies[@]}"; do
    while IFS= read -r f; do
        case "$(basename "$f")" in README*) continue ;; esac
        [ "$f" -nt "$stamp" ] || stale+=("$f")
    done < <(git ls-files -- "results/$s/")
done
if [ -n "$changed" ] || [ ${#stale[@]} -gt 0 ]; then
    if [ -n "$changed" ]; then
        echo "check_reproduce: NOT byte for byte; results/ after the rerun differs from git:" >&2
        echo "$changed" >&2
    fi
    if [ ${#stale[@]} -gt 0 ]; then
        echo "check_reproduce: committed but not written by the rerun (stale):" >&2
        printf '  %s\n' "${stale[@]}" >&2
    fi
    exit 1
fi
echo "check_reproduce: results/ byte for byte as committed (${#studies[@]} studies)"
