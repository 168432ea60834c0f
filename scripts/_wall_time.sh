# Sourced by scripts/reproduce_*.sh: `wall_time NAME START [WHAT...]` prints, as a script's
# last line, its wall time since START (a $SECONDS value) and the machine's CPU cores, so a
# timing quoted in README.md can be checked against what the script says.
wall_time() {
    local name=$1 start=$2
    shift 2
    echo "$name: $((SECONDS - start)) s wall on $(nproc) CPU cores${*:+; $*}"
}
