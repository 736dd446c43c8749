#!/usr/bin/env bash
# NCCL's own code as the oracle (issue 42; docs/nccl-harness.md): builds
# nccl-harness, NCCL's topology and GPUDirect RDMA decision code compiled
# from each NCCL release in the fixtures (cargo xtask nccl-harness), and
#   - runs it over the topologies of nccl-harness/topologies with the
#     environment and configuration files each line of its `expected` file
#     gives, for every release, comparing NCCL's decision for every GPU x
#     NIC pair (path type, GDR for reads and writes, PXN's proxy rank)
#     with what NCCL's documented rules say;
#   - runs readiness/tests/nccl_oracle.rs: the check's NCCL verdict against
#     NCCL's own over the same sysfs tree (nccl-harness --sysfs), for every
#     modelled node shape of its catalogue under four levels, and for
#     NCCL_NET_GDR_LEVEL in the environment and in NCCL's configuration
#     files, arrangement by arrangement; then every tree the other readiness
#     tests build, judged by NCCL's code beside their own assertions;
#   - runs readiness/tests/generated.rs: 1000 seeded node trees nobody
#     chose, every level, both releases (issue 57), and each mutant of
#     readiness/tests/mutants (a rule switched off) must be told apart;
#   - for every real node of the readiness corpus (readiness/tests/real:
#     lent H100/H200 hosts, each with NCCL 2.28.9's own topology dump),
#     compares gpudirect-rdma-check's NCCL verdict over the node's dump with
#     NCCL's own decisions over NCCL's own dump of the same node.
# Without the NCCL fixtures it says skipped. The first run downloads
# Debian's CUDA headers (ci/fetch-cuda-headers.sh, cached).
# Last line: "N passed, M failed". Scratch: $NVPM_TEST_DIR (default
# /var/tmp/nv-peer-mem-test-nccl).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${NVPM_TEST_DIR:-/var/tmp/nv-peer-mem-test-nccl}
. "$here/checks.sh"

fixtures=${NVPM_FIXTURES:-$root/../shared/fixtures}
releases=()
for r in 2.28.9-1 2.30.7-1; do
    if [ -f "$fixtures/nccl-$r.tar.gz" ]; then
        releases+=("$r")
    else
        skip "NCCL $r: no $fixtures/nccl-$r.tar.gz (set NVPM_FIXTURES)"
    fi
done
if [ ${#releases[@]} = 0 ]; then
    skip_suite "NCCL's own code: no NCCL release in $fixtures"
fi
rm -rf "$work" && mkdir -p "$work" && : >"$work/log"
topologies=$root/nccl-harness/topologies

check "xtask and gpudirect-rdma-check build" cargo build --release --locked -q -p xtask -p readiness
build_args=()
for r in "${releases[@]}"; do build_args+=(--nccl "$r"); done
check "cargo xtask nccl-harness: NCCL ${releases[*]} built from the fixtures" "$root/target/release/xtask" nccl-harness "${build_args[@]}"

# decisions RELEASE TOPOLOGY [VAR=VALUE...]: the harness's answer, one
# "rank R path P gdr_read X gdr_write Y proxy_rank Z" per pair, joined by
# "; " (bandwidth, hop count and bus ids left out: the rules say nothing
# of them).
decisions() {
    local release=$1 file=$2
    shift 2
    env -u NCCL_CONF_FILE NCCL_HOSTID=nccl-harness "$@" \
        "$root/target/nccl-harness/$release/nccl-harness" "$file" |
        sed -n 's/^gpu [^ ]* \(rank [0-9]*\) net [0-9]* name [^ ]* \(path [A-Z0-9]*\) bw [^ ]* hops [0-9]* \(.*\)$/\1 \2 \3/p' |
        paste -sd';' | sed 's/;/; /g'
}
said() {  # said RELEASE WANT TOPOLOGY [VAR=VALUE...]
    local release=$1 want=$2 got
    shift 2
    got=$(decisions "$release" "$@") || return 1
    echo "NCCL $release: $got"
    [ "$got" = "$want" ] || { echo "the rules say: $want"; return 1; }
}

echo "== NCCL's decisions on the modelled topologies, against the rules"
while IFS= read -r line; do
    case $line in '' | '#'*) continue ;; esac
    # "@RELEASE " first: a rule of that NCCL release only.
    only=
    case $line in '@'*) only=${line%% *} only=${only#@} line=${line#* } ;; esac
    spec=${line%%: *} want=${line#*: }
    read -r -a words <<<"$spec"
    file=$topologies/${words[0]}
    env_args=()
    for w in "${words[@]:1}"; do
        case $w in
        NCCL_HARNESS_*_CONF=*) env_args+=("${w%%=*}=$topologies/${w#*=}") ;;
        *) env_args+=("$w") ;;
        esac
    done
    for r in "${releases[@]}"; do
        [ -z "$only" ] || [ "$only" = "$r" ] || continue
        check "NCCL $r, $spec: $want" said "$r" "$want" "$file" "${env_args[@]}"
    done
done <"$topologies/expected"

echo "== real nodes: gpudirect-rdma-check's NCCL verdict against NCCL's own"
# NCCL's own dumps are 2.28.9's (readiness/tests/real/README.md); each
# release judges them. gpudirect-rdma-check's verdict is its nccl fact:
# "no GPUDirect RDMA" or not.
check_vs_nccl() {  # check_vs_nccl RELEASE NODE-DIR
    local release=$1 node=$2 ours theirs
    # (its exit status is the node's verdict, 3 on these hosts: no RDMA device)
    ours=$({ "$root/target/release/gpudirect-rdma-check" --from "$node/dump.tar" --json || true; } |
        jq -r '.facts[] | select(.check == "nccl") | .message') || return 1
    [ -n "$ours" ] || { echo "no nccl fact"; return 1; }
    echo "gpudirect-rdma-check: $ours"
    case $ours in
    *"no GPUDirect RDMA"* | *"does not use GPUDirect RDMA"*) ours=off ;;
    *) ours=on ;;
    esac
    theirs=$(decisions "$release" "$node/nccl-topo.xml") || return 1
    echo "NCCL $release: $theirs"
    [ -n "$theirs" ] || return 1
    # NCCL uses GPUDirect RDMA on this node when some GPU has it towards
    # some NIC, for reads or writes.
    if printf '%s\n' "$theirs" | grep -q 'gdr_read on\|gdr_write on'; then theirs=on; else theirs=off; fi
    echo "GPUDirect RDMA: gpudirect-rdma-check $ours, NCCL $theirs"
    [ "$ours" = "$theirs" ]
}
for node in "$root"/readiness/tests/real/*/; do
    node=${node%/}
    [ -f "$node/dump.tar" ] && [ -f "$node/nccl-topo.xml" ] || continue
    for r in "${releases[@]}"; do
        check "${node##*/}: gpudirect-rdma-check's NCCL verdict = NCCL $r's over its own dump" check_vs_nccl "$r" "$node"
    done
done

echo "== the check against NCCL's own code over the same sysfs trees"
# readiness/tests/nccl_oracle.rs (nccl-harness --sysfs over the check's own
# test trees): every modelled node shape of its catalogue under NCCL's
# default level, PIX, PHB and SYS (the distance, the NIC and the verdict,
# GPU by GPU); NCCL_NET_GDR_LEVEL in the environment and in NCCL's
# configuration files, on a PHB and a SYS node.
oracle() {  # oracle TEST-NAME-FILTER
    env NVPM_NCCL_HARNESS_DIR="$root/target/nccl-harness" \
        cargo test --locked -q -p readiness --test nccl_oracle -- --ignored --nocapture "$1"
}
check "nccl_oracle: every modelled node shape judged as NCCL judges it, each release" \
    oracle every_modelled_node_is_judged_as_nccl_judges_it
check "nccl_oracle: the check's NCCL verdict = NCCL's on 13 arrangements x 2 shapes x each release" \
    oracle the_level_rule

# Every tree the readiness tests run the check over in its default form,
# judged by NCCL's own code as well (tests/common/oracle.rs through
# Tree::run_with): the tests' own assertions, and NCCL's on top.
every_tree() {
    local judged=$work/judged
    : >"$judged"
    env NVPM_NCCL_HARNESS_DIR="$root/target/nccl-harness" NVPM_NCCL_ORACLE="$judged" \
        cargo test --locked -q -p readiness --test topologies --test verdicts --test forms \
        --test monitoring --test corpus || return 1
    local trees verdicts
    trees=$(wc -l <"$judged")
    verdicts=$(awk '{n += $2} END {print n + 0}' "$judged")
    echo "NCCL's own code judged $trees trees: $verdicts GPU verdicts, all releases together"
    [ "$trees" -gt 20 ]
}
check "every tree of the readiness tests judged by NCCL's own code as the check judged it" every_tree

echo "== generated nodes: shapes nobody chose, judged by NCCL's own code"
# readiness/tests/generated.rs (issue 57): seeded node trees
# (tests/common/generator.rs: sockets, NUMA -1, root ports, PLX (one level
# or chained), Microchip and Broadcom Gen4/Gen5 switches (two levels, one,
# or a lower level NCCL does not fuse), VMD domains, one- and two-function
# NICs with SR-IOV VFs, InfiniBand and RoCE, every port state, NVSwitches,
# NVLink bridges and meshes, NCCL_IB_HCA, topology files in Azure's shapes
# through NCCL_TOPO_FILE or nvidia-topologyd's path), each at NCCL's
# default, PIX, PHB and SYS, against both
# releases, GPU by GPU; a difference names the seed that rebuilds its node,
# and the first is shrunk to the smallest node that still differs. A long
# run outside CI: NVPM_GENERATED_NODES.
generated_nodes=${NVPM_GENERATED_NODES:-1000}
# The nodes' trees are written in memory where the machine has /dev/shm:
# writing them costs more than judging them (about 2.5 times faster here).
tree_dir=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && tree_dir=/dev/shm
generated() {  # generated [ENV=VALUE...]: the differential, its figures
    env TMPDIR="$tree_dir" NVPM_NCCL_HARNESS_DIR="$root/target/nccl-harness" NVPM_GENERATED_NODES="$generated_nodes" "$@" \
        cargo test --locked -q -p readiness --test generated -- --ignored --nocapture generated_nodes
}
check "$generated_nodes generated nodes x 4 levels x each release: the check's NCCL verdicts = NCCL's" generated

# Each rule of readiness/tests/mutants switched off in a copy of the
# workspace: the same differential must tell it apart (it stops at the
# first node that differs).
mutant_caught() {  # mutant_caught SED-SCRIPT
    local name copy file
    name=$(basename "$1" .sed)
    copy=$work/mutant-$name
    rm -rf "$copy" && mkdir -p "$copy"
    (cd "$root" && git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy") || return 1
    file=$(sed -n '1s/^# mutates \([^:]*\):.*/\1/p' "$1")
    sed -i -f "$1" "$copy/$file"
    if cmp -s "$copy/$file" "$root/$file"; then
        echo "$1 changed nothing in $file"
        return 1
    fi
    (cd "$copy" && CARGO_TARGET_DIR=$work/mutant-target cargo build --locked -q -p readiness --bin gpudirect-rdma-check) || return 1
    local bin=$work/mutant-target/debug/gpudirect-rdma-check
    ! generated NVPM_CHECK_BIN="$bin" NVPM_GENERATED_STOP=1 >"$work/mutant-$name.log" 2>&1 || return 1
    grep -m1 '^seed ' "$work/mutant-$name.log" | cut -c1-60
    # The run's first difference is shrunk; the command it prints rebuilds
    # a node that still differs.
    local smallest
    smallest=$(grep -m1 -o 'NVPM_GENERATED_SEED=[0-9]* NVPM_GENERATED_NODES=1 NVPM_GENERATED_OMIT=[0-9,]*' "$work/mutant-$name.log") || {
        echo "no smallest node in $work/mutant-$name.log"
        return 1
    }
    grep -m1 '^smallest node' "$work/mutant-$name.log" | cut -c1-100
    # shellcheck disable=SC2086 # the printed command's words
    ! generated NVPM_CHECK_BIN="$bin" $smallest >"$work/mutant-$name-smallest.log" 2>&1
}
for mutant in "$root"/readiness/tests/mutants/*.sed; do
    check "mutant $(basename "$mutant" .sed): $(sed -n '1s/^# mutates [^:]*: //p' "$mutant") ... told apart by the generated nodes" mutant_caught "$mutant"
done

finish
