# Sourced. private_apt DIR SOURCES-LINE... : sets the array apt_opts so that
# `apt-get "${apt_opts[@]}"` and `apt-cache "${apt_opts[@]}"` use their own
# sources list, lists and archive cache under DIR, never this host's apt
# state (no other suite can then replace a host package: docs/testing.md,
# "The host"). Extra apt options may follow in apt_extra before the call.
private_apt() {
    local dir=$1; shift
    mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/debs"
    printf '%s\n' "$@" >"$dir/sources.list"
    apt_opts=(
        -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$dir/lists" -o Dir::State::status=/dev/null
        -o "Dir::Cache=$dir" -o "Dir::Cache::archives=$dir/archives"
        -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
        -o Debug::NoLocking=1
        # apt's _apt user cannot write to the cache; download as the caller.
        -o APT::Sandbox::User=root
        "${apt_extra[@]}"
    )
}
