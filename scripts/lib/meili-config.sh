# shellcheck shell=bash
# The indexing memory of a Meilisearch that ../shared/servers/start runs in
# DIR (`start --dir DIR`): Meilisearch reads ./config.toml from its working
# directory, DIR/meilisearch, and `start` passes no option of its own for it.
# Meilisearch 1.50 spends CPU on every indexing batch in proportion to
# max_indexing_memory (docs/benchmarks.md, "Meilisearch's cost per batch").
#
#   meili_config_set DIR VALUE   before `start`: VALUE such as "1 GiB"
#   meili_config_shown DIR       the value a Meilisearch in DIR runs with, in
#                                words, for a benchmark's report

meili_config_set() {
    mkdir -p "$1/meilisearch"
    printf 'max_indexing_memory = "%s"\n' "$2" >"$1/meilisearch/config.toml"
}

meili_config_shown() {
    local value
    value=$(sed -n 's/^max_indexing_memory *= *"\(.*\)"$/\1/p' "$1/meilisearch/config.toml" 2>/dev/null || true)
    echo "max_indexing_memory ${value:-at Meilisearch's default (two thirds of the machine's memory)}"
}
