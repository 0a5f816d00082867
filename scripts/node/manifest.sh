# shellcheck shell=bash
# The strict reader of versions.env, shared by every node script (through lib.sh) and by the
# observability scripts: KEY=VALUE lines and comments only, never sourced, never expanded.
# Sourced, never run. The caller defines usage_error MESSAGE (prints it, exits 2) and, for the
# default manifest path, FMINFRA_VERSIONS.

declare -gA MANIFEST=()

# load_manifest [FILE]: read the manifest (default $FMINFRA_VERSIONS) into MANIFEST.
load_manifest() {
    local file=${1:-$FMINFRA_VERSIONS} line number=0
    FMINFRA_VERSIONS=$file
    [[ -r $file ]] || usage_error "$file: version manifest not found"
    while IFS= read -r line || [[ -n $line ]]; do
        number=$((number + 1))
        [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
        if [[ $line =~ ^([A-Z][A-Z0-9_]*)=([A-Za-z0-9._:/+,@-]*)$ ]]; then
            [[ -z ${MANIFEST[${BASH_REMATCH[1]}]+set} ]] || usage_error "$file: line $number: ${BASH_REMATCH[1]} is set twice"
            MANIFEST[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        else
            usage_error "$file: line $number: expected KEY=VALUE (no quotes, spaces or expansions), got '$line'"
        fi
    done <"$file"
}

# A pinned value that must be set.
ver() {
    local value=${MANIFEST[$1]:-}
    [[ -n $value ]] || usage_error "$FMINFRA_VERSIONS: $1: not set"
    printf '%s' "$value"
}

# A pinned value that may be empty (the manifest's comment says what empty means).
ver_optional() {
    [[ -n ${MANIFEST[$1]+set} ]] || usage_error "$FMINFRA_VERSIONS: $1: missing (it may be empty, but must be present)"
    printf '%s' "${MANIFEST[$1]}"
}
