# Sourced by ci/test-rpm.sh: installs rpm packages into a scratch root with
# a real resolver, dnf (libsolv), from a repository made with createrepo_c,
# as `dnf install` does on a RHEL, Fedora or SLES host from its repositories.
#   resolver_repo <dir> <rpm>...              a repository of those rpms
#   resolver_dnf <root> <repo> <dnf args>...  dnf against that repository
#                                             only, into <root>; its output
#                                             in <root>.log
#   resolver_installed <root>                 the root's packages, NAME per
#                                             line, sorted
# Scriptlets are not run (tsflags=noscripts): the scratch root has no shell
# or tools; the scriptlets are tested on their own in ci/test-rpm.sh.
# Without GPG checks: the packages are this test's builds and stand-ins,
# unsigned; signed repositories are the fleet route's (docs/packaging.md).
# Nothing outside <dir> and <root> changes: dnf's cache and configuration
# are under <root>.

resolver_repo() {
    local dir=$1; shift
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$@" "$dir/" && createrepo_c --quiet "$dir"
}

resolver_dnf() {
    local root=$1 repo=$2; shift 2
    mkdir -p "$root/etc/yum.repos.d" "$root/cache"
    dnf -y --installroot="$root" --releasever=1 --setopt=reposdir="$root/etc/yum.repos.d" \
        --setopt=cachedir="$root/cache" --setopt=tsflags=noscripts --setopt=install_weak_deps=False \
        --nogpgcheck --repofrompath="test,$repo" --repo=test "$@" >"$root.log" 2>&1
    local status=$?
    sed 's/^/    /' "$root.log"
    return $status
}

resolver_installed() {
    rpm -qa --root "$1" --qf '%{NAME}\n' | sort
}
