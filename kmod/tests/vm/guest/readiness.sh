# Sourced by the test guest's init before the scenarios when the image
# holds gpudirect-rdma-check (test-vm stages a static build for x86_64
# guests; docs/readiness.md): the readiness check over a real kernel's
# sysfs and procfs (QEMU's PCI functions, no GPU, no RDMA device), bare and
# with the MLNX_OFED core double loaded. Prints NVPMTEST PASS|FAIL lines as
# scenarios.sh does; expects $M.
R=$M/gpudirect-rdma-check

# readiness_check name: runs the check; RC, JSON and PROM hold its results
readiness_check() {
	JSON=$($R --json)
	RC=$?
	PROM=$($R --prometheus)
	$R >/dev/null
	HUMAN_RC=$?
}

# has "fragment": the JSON output contains it
has() { case "$JSON" in *"$1"*) return 0 ;; esac; return 1; }

readiness_verdict() { # name detail failure...
	name=$1
	detail=$2
	shift 2
	if [ $# -eq 0 ]; then
		echo "NVPMTEST PASS $name: $detail"
	else
		echo "NVPMTEST FAIL $name: $*"
		echo "$JSON"
	fi
}

readiness_check
set --
[ "$RC" = 3 ] || set -- "$@" "exit status $RC, want 3 (nothing to check)"
[ "$HUMAN_RC" = "$RC" ] || set -- "$@" "the human form exits $HUMAN_RC, --json $RC"
has '"check":"read"' && set -- "$@" "a file of the real sysfs could not be read"
has '"check":"gpu","subject":"node","status":"fail"' || set -- "$@" "no 'no NVIDIA GPU' fact"
has '"check":"nic","subject":"node","status":"fail"' || set -- "$@" "no 'no RDMA device' fact"
has '"check":"driver","subject":"node","status":"fail"' || set -- "$@" "no 'driver not loaded' fact"
has '"path":"none"' || set -- "$@" "path is not none"
has 'no PeerDirect core' || set -- "$@" "a PeerDirect core was seen with none loaded"
case "$PROM" in *"gpudirect_rdma_exit_status 3"*) ;; *) set -- "$@" "Prometheus form without gpudirect_rdma_exit_status 3" ;; esac
pci=$(ls /sys/bus/pci/devices | wc -l)
readiness_verdict readiness_bare "$pci PCI functions read from the real sysfs, no GPU, no RDMA device: exit 3, path none, no PeerDirect core" "$@"

set --
# The check finds the core as depmod would describe it: modules.symbols
# names the module that exports the peer API (this guest has no depmod
# files, so the line is written here), and the kernel's own
# /sys/module/<module>/taint must say O (out of tree) once it is loaded.
syms=/lib/modules/$(uname -r)/modules.symbols
mkdir -p "${syms%/*}" && echo "alias symbol:ib_register_peer_memory_client mofed_peer_core" >"$syms"
if out=$(insmod $M/mofed_peer_core.ko 2>&1); then
	taint=$(cat /sys/module/mofed_peer_core/taint 2>&1)
	readiness_check
	rmmod mofed_peer_core
	case "$taint" in *O*) ;; *) set -- "$@" "the kernel's taint of the out-of-tree module is '$taint', without O" ;; esac
	has "MLNX_OFED's PeerDirect core is loaded" || set -- "$@" "the core was not found by modules.symbols and its taint"
	[ "$RC" = 3 ] || set -- "$@" "exit status $RC, want 3"
	# unloaded, the same modules.symbols line no longer counts
	readiness_check
	has 'no PeerDirect core' || set -- "$@" "a core named by modules.symbols but not loaded was taken for loaded"
else
	set -- "$@" "insmod mofed_peer_core: $out"
fi
rm -f "$syms"
readiness_verdict readiness_peer_core "MLNX_OFED's core (the fixture's peer_mem.c) found by modules.symbols and the real kernel's taint O for its module, and not once unloaded" "$@"
