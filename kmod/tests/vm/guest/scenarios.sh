# The VM scenarios, sourced by a guest after it set:
#   M                 directory holding nvpm_scenarios.ko (and $PROVIDERS' .ko)
#   PROVIDERS         modules to insmod from $M before the scenario driver
#                     (the busybox guest: the two doubles; a booted image
#                     whose packages loaded them already: none)
#   PROVIDERS_ARE     what the providers are, for the load line
#   UNLOAD            modules to rmmod at the end, after the scenario driver
#   KO                the nv_peer_mem.ko under test
#   KO_NO_PERSISTENT  nv_peer_mem.ko built against an nv-p2p.h without the
#                     persistent API
# and nv_peer_mem not loaded. Prints one line per scenario:
#   NVPMTEST PASS <name>: <detail>
#   NVPMTEST FAIL <name>: <reason>
# and leaves the counts in $pass and $fail. Returns 1 (after a FAIL line)
# when a provider cannot be loaded. Runs under busybox sh and dash.
CTL=/sys/kernel/debug/nvpm/ctl
RES=/sys/kernel/debug/nvpm/result
pass=0
fail=0

report() { # name PASS|FAIL detail
	if [ "$2" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
	echo "NVPMTEST $2 $1: $3"
}
# ctl "command": runs it in nvpm_scenarios.ko; RESULT holds PASS/FAIL text
ctl() {
	echo "$1" >$CTL 2>/dev/null
	rc=$?
	RESULT=$(cat $RES)
	return $rc
}
refcnt() { cat /sys/module/nv_peer_mem/refcnt 2>/dev/null || echo none; }
loaded() { [ -d /sys/module/nv_peer_mem ]; }
# scenario name "command": a kernel scenario, plus the module's refcount
# check (every context must have dropped its module reference)
scenario() {
	name=$1
	if ctl "$2"; then
		r=$(refcnt)
		if [ "$r" != 0 ] && [ "$r" != none ]; then
			report "$name" FAIL "nv_peer_mem refcount is $r after the scenario (a context kept its module reference)"
		else
			report "$name" PASS "${RESULT#PASS }"
		fi
	else
		report "$name" FAIL "${RESULT#FAIL }"
	fi
}
# settled_slab_kb: the unreclaimable slab in kB (SUnreclaim: kmalloc and
# kmem caches, where a leaked context or sg table would stay; the
# reclaimable dentry and inode caches move with any file access), the
# least of five readings a second apart: right after the benchmark the
# kernel may still be handing slab pages back (seen on arm64 under TCG:
# "Slab" 100-1600 kB above its baseline for a moment); a leak stays.
settled_slab_kb() {
	least=
	for _ in 1 2 3 4 5; do
		kb=$(awk '/^SUnreclaim:/ { print $2 }' /proc/meminfo)
		if [ -z "$least" ] || [ "$kb" -lt "$least" ]; then least=$kb; fi
		sleep 1
	done
	echo "$least"
}
# The per-client directory NCCL, UCX and NVSHMEM test for (issues 25 and
# 41, docs/contracts.md "memory_peers without mm_kobj"): MLNX_OFED's core
# makes it where its configure defined HAVE_MM_KOBJ_EXPORTED for this
# kernel (the host put its decisions in $M/mofed_config.h,
# xtask/src/vm/mofed_config.rs); elsewhere nv_peer_mem makes it, as a link
# /sys/kernel/mm/memory_peers -> /sys/module/nv_peer_mem/memory_peers.
# nv_peer_mem's read-only parameter memory_peers says which.
peer_file() { cat "/sys/kernel/mm/memory_peers/$1/$2" 2>/dev/null; }
mofed_sysfs() { grep -q '^#define HAVE_MM_KOBJ_EXPORTED 1' "$M/mofed_config.h" 2>/dev/null; }
who_made() { cat /sys/module/nv_peer_mem/parameters/memory_peers 2>/dev/null; }
OURS=/sys/module/nv_peer_mem/memory_peers
# nccl_says WANT: NCCL's own test, access(path, F_OK), of every file its
# ibGdrSupportInitOnce() names (nccl_gdr_files.c; the paths from NCCL
# 2.28.9's and 2.30.7's source, xtask/src/vm/nccl_probe.rs). Sets NCCL_SAID
# to what it said, or why it did not run (an image without the probe);
# returns 1 when it ran and KNL_MODULE_LOADED was not WANT (1 or 0) for
# both memory_peers/nv_mem/version and nv_mem_nc/version.
nccl_loaded() { echo "$NCCL_OUT" | awk -v p="$1" '$2 == p { print $1 }'; }
nccl_says() {
	if [ ! -x "$M/nccl_gdr_files" ]; then
		NCCL_SAID="NCCL's access check not run: $(cat "$M/nccl_gdr_files.skip" 2>/dev/null || echo "no probe in this image")"
		return 0
	fi
	NCCL_OUT=$("$M/nccl_gdr_files" $(awk '{ print $2 }' "$M/nccl_gdr_files.list" | sort -u))
	NCCL_SAID="NCCL's own access(F_OK) test: $(echo "$NCCL_OUT" | sed 's|/sys/kernel/mm/memory_peers/||; s|/sys/module/||' | tr '\n' ',' | sed 's/,$//')"
	[ "$(nccl_loaded /sys/kernel/mm/memory_peers/nv_mem/version)" = "$1" ] &&
		[ "$(nccl_loaded /sys/kernel/mm/memory_peers/nv_mem_nc/version)" = "$1" ]
}
memory_peers_check() {
	mv=$(cat /sys/module/nv_peer_mem/version 2>/dev/null)
	who=$(who_made)
	v=$(peer_file nv_mem version) vnc=$(peer_file nv_mem_nc version)
	set --
	if [ -z "$mv" ]; then
		set -- "/sys/module/nv_peer_mem/version is missing (UCX tests it)"
	elif [ ! -f "$M/mofed_config.h" ]; then
		set -- "$M/mofed_config.h is missing: the host did not say how MLNX_OFED's core was configured"
	elif mofed_sysfs; then
		maker="MLNX_OFED's core (this kernel exports mm_kobj)"
		[ "$who" = core ] || set -- "$@" "parameter memory_peers says '$who', want core"
		[ -e $OURS ] && set -- "$@" "nv_peer_mem made $OURS beside the core's directory"
		[ -L /sys/kernel/mm/memory_peers ] && set -- "$@" "/sys/kernel/mm/memory_peers is a link, not the core's directory"
	else
		maker="nv_peer_mem (this kernel exports no mm_kobj, MLNX_OFED's core made none): $(ls -l /sys/kernel/mm/ | sed -n 's/.* memory_peers -> /memory_peers -> /p')"
		[ "$who" = nv_peer_mem ] || set -- "$@" "parameter memory_peers says '$who', want nv_peer_mem"
		case $(readlink /sys/kernel/mm/memory_peers) in
		*/module/nv_peer_mem/memory_peers) ;;
		*) set -- "$@" "/sys/kernel/mm/memory_peers is not a link to $OURS: '$(readlink /sys/kernel/mm/memory_peers)'" ;;
		esac
	fi
	[ -n "$mv" ] && { [ "$v" = "$mv" ] && [ "$vnc" = "$mv" ]; } ||
		set -- "$@" "memory_peers/nv_mem/version '$v', nv_mem_nc/version '$vnc', /sys/module/nv_peer_mem/version '$mv'"
	nccl_says 1 || set -- "$@" "$NCCL_SAID"
	if [ $# -eq 0 ]; then
		report memory_peers PASS "memory_peers/nv_mem and nv_mem_nc by $maker, version $mv as /sys/module/nv_peer_mem/version; $NCCL_SAID"
	else
		report memory_peers FAIL "$*"
	fi
}
# memory_peers_taken: another module's /sys/kernel/mm/memory_peers (the
# scenario driver's link, as a peer client that makes its own would) is
# left alone: nv_peer_mem loads, makes nothing, logs one line and its
# parameter says failed; once it is gone, nv_peer_mem makes its own again.
# Only where nv_peer_mem makes the files: where the core makes them, a
# squatter would fail the core's registrations, not nv_peer_mem's files.
memory_peers_taken_check() {
	if mofed_sysfs; then
		report memory_peers_taken PASS "not applicable: MLNX_OFED's core makes memory_peers on this kernel (see memory_peers)"
		return
	fi
	if ! ctl squat; then
		report memory_peers_taken FAIL "${RESULT#FAIL }"
		return
	fi
	dmesg -c >/dev/null
	set --
	if out=$(insmod "$KO" $BOTH_CLIENTS 2>&1); then
		who=$(who_made)
		lines=$(dmesg | grep -c "NCCL will not use nv_peer_mem")
		case $who in "failed -17") ;; *) set -- "$@" "parameter memory_peers says '$who', want 'failed -17'" ;; esac
		[ "$lines" = 1 ] || set -- "$@" "$lines kernel log lines say NCCL will not use nv_peer_mem, want 1"
		[ -e $OURS ] && set -- "$@" "$OURS left after the failure"
		case $(readlink /sys/kernel/mm/memory_peers) in
		*/module/nvpm_scenarios) ;;
		*) set -- "$@" "the other module's link now says '$(readlink /sys/kernel/mm/memory_peers)'" ;;
		esac
		rmmod nv_peer_mem || set -- "$@" "rmmod nv_peer_mem failed"
	else
		set -- "$@" "insmod failed although the clients work without the files: $out"
	fi
	ctl unsquat
	{ [ -e /sys/kernel/mm/memory_peers ] || [ -L /sys/kernel/mm/memory_peers ]; } &&
		set -- "$@" "/sys/kernel/mm/memory_peers left after both modules gave it up"
	if out=$(insmod "$KO" $BOTH_CLIENTS 2>&1); then
		[ "$(who_made)" = nv_peer_mem ] && [ -n "$(peer_file nv_mem version)" ] ||
			set -- "$@" "the next load made no memory_peers/nv_mem (parameter: '$(who_made)')"
		rmmod nv_peer_mem
	else
		set -- "$@" "the next insmod failed: $out"
	fi
	if [ $# -eq 0 ]; then
		report memory_peers_taken PASS "another module's /sys/kernel/mm/memory_peers: nv_peer_mem loaded, left it alone, made nothing, said so in one log line and in parameter memory_peers ('failed -17'); once it was gone the next load made its own"
	else
		report memory_peers_taken FAIL "$*"
	fi
}
# memory_peers_reload_check: each provider reloaded under nv_peer_mem's
# files (the core, then the NVIDIA driver; nv_peer_mem unloaded first, as
# modprobe -r would): the next load makes them again, its unload takes them
# away. The busybox guest insmods its doubles from $M, a booted image
# modprobes its packages' modules.
memory_peers_reload_check() {
	set --
	done_list=
	for m in $UNLOAD; do
		rmmod $m 2>/dev/null || { set -- "$@" "rmmod $m failed"; break; }
		if [ -f "$M/$m.ko" ]; then
			out=$(insmod $M/$m.ko 2>&1)
		else
			out=$(modprobe $m 2>&1)
		fi || { set -- "$@" "loading $m again: $out"; break; }
		out=$(insmod "$KO" $BOTH_CLIENTS 2>&1) || { set -- "$@" "insmod nv_peer_mem after reloading $m: $out"; break; }
		[ "$(peer_file nv_mem version)" = "$(cat /sys/module/nv_peer_mem/version)" ] ||
			set -- "$@" "after reloading $m: memory_peers/nv_mem/version '$(peer_file nv_mem version)'"
		rmmod nv_peer_mem
		[ -e /sys/kernel/mm/memory_peers/nv_mem ] && set -- "$@" "after reloading $m: memory_peers/nv_mem left after rmmod"
		[ -L /sys/kernel/mm/memory_peers ] && set -- "$@" "after reloading $m: the memory_peers link left after rmmod"
		done_list="$done_list $m"
	done
	[ -z "$done_list" ] && [ $# -eq 0 ] && set -- "no provider to reload (UNLOAD is empty)"
	if [ $# -eq 0 ]; then
		report memory_peers_reload PASS "reloaded$done_list in turn: each next load of nv_peer_mem made memory_peers/nv_mem again, each unload took it away"
	else
		report memory_peers_reload FAIL "$*"
	fi
}
# peer_counters_check F0 F1: 3 registrations of 64 KiB through nv_mem and
# their release move MLNX_OFED's counters by exactly that; the invalidate
# scenario's free callbacks (F0 before it, F1 after) are counted.
peer_counters_check() {
	a0=$(peer_file nv_mem num_alloc_mrs) d0=$(peer_file nv_mem num_dealloc_mrs)
	rb0=$(peer_file nv_mem num_reg_bytes) db0=$(peer_file nv_mem num_dereg_bytes)
	if ! ctl "hold 3"; then
		report peer_counters FAIL "${RESULT#FAIL }"
		return
	fi
	a1=$(peer_file nv_mem num_alloc_mrs) rb1=$(peer_file nv_mem num_reg_bytes)
	ctl drop
	d2=$(peer_file nv_mem num_dealloc_mrs) db2=$(peer_file nv_mem num_dereg_bytes)
	got="alloc_mrs +$((a1 - a0)), reg_bytes +$((rb1 - rb0)), dealloc_mrs +$((d2 - d0)), dereg_bytes +$((db2 - db0)), free_callbacks $1 -> $2"
	if [ $((a1 - a0)) = 3 ] && [ $((d2 - d0)) = 3 ] && [ $((rb1 - rb0)) = 196608 ] && [ $((db2 - db0)) = 196608 ] && [ "$2" -gt "$1" ]; then
		report peer_counters PASS "3 registrations of 64 KiB and their release, counted by $(who_made): $got"
	else
		report peer_counters FAIL "want alloc/dealloc +3, reg/dereg bytes +196608, more free callbacks; got $got"
	fi
}

# invalid_param name value: loading with it must fail with EINVAL, say why
# in the kernel log and leave no client registered
invalid_param() {
	dmesg -c >/dev/null
	if out=$(insmod "$KO" "$1=$2" 2>&1); then
		rmmod nv_peer_mem
		report "${1%_support}_invalid" FAIL "insmod $1=$2 succeeded"
		return
	fi
	log=$(dmesg | grep -i "$1")
	case "$out" in
	# EINVAL as busybox's insmod words it, and as kmod's (its
	# mod_strerror() says "Invalid parameters" for EINVAL).
	*"Invalid argument"* | *"Invalid parameters"*)
		if [ -z "$log" ]; then
			report "${1%_support}_invalid" FAIL "insmod failed with EINVAL but the kernel log says nothing about $1"
		elif ctl "run register_none"; then
			report "${1%_support}_invalid" PASS "insmod: EINVAL; log: $(echo "$log" | head -n1 | sed 's/^\[[^]]*\] //')"
		else
			report "${1%_support}_invalid" FAIL "${RESULT#FAIL }"
		fi ;;
	*) report "${1%_support}_invalid" FAIL "insmod $1=$2 failed with \"$out\", want EINVAL (Invalid argument / Invalid parameters)" ;;
	esac
}
# The scenarios below exercise both clients: the invalidating nv_mem and the
# persistent nv_mem_nc, i.e. persistent_api_support=0 (the default registers
# the persistent client alone, as nv_mem; see persistent_default below).
BOTH_CLIENTS="persistent_api_support=0"

# nvpm.iter_divisor=N on the kernel command line (test-vm sets it per
# architecture, xtask/src/vm/arch.rs): the race, the benchmark and the load
# cycles run 1/N of their iterations; the leak threshold of no_slab_growth
# shrinks with the benchmark's count. Absent (the booted image): 1.
DIV=$(sed -n 's/.*nvpm\.iter_divisor=\([0-9]*\).*/\1/p' /proc/cmdline)
DIV=${DIV:-1}
BENCH_N=$((100000 / DIV))
CYCLES=$((200 / DIV))
echo "NVPMTEST-ITERATIONS divisor $DIV: race $((10000 / DIV)), benchmark $BENCH_N, load cycles $CYCLES"

for m in $PROVIDERS nvpm_scenarios; do
	args=
	[ $m = nvpm_scenarios ] && args="iter_divisor=$DIV"
	if ! out=$(insmod $M/$m.ko $args 2>&1); then
		report load FAIL "insmod $m.ko: $out"
		return 1
	fi
done

# --- load order and registration --------------------------------------
if [ ! -f "$KO" ]; then
	report load FAIL "$KO does not exist (see the host's build output)"
elif out=$(insmod "$KO" $BOTH_CLIENTS 2>&1); then
	report load PASS "insmod $KO $BOTH_CLIENTS after nvidia and ib_core ($PROVIDERS_ARE)"
else
	report load FAIL "insmod $KO: $out"
fi

if loaded; then
	memory_peers_check
	scenario register "run register"
	scenario acquire "run acquire"
	scenario lifecycle "run lifecycle"
	scenario several "run several"
	scenario dma_map_refusals "run dma_map_refusals"
	scenario page_table_version "run page_table_version"
	f0=$(peer_file nv_mem num_free_callbacks)
	scenario invalidate "run invalidate"
	f1=$(peer_file nv_mem num_free_callbacks)
	peer_counters_check "${f0:-0}" "${f1:-0}"
	scenario free_during_get "run free_during_get"
	scenario nc "run nc"
	scenario inject "run inject"
	scenario race "run race"
	scenario stale_page_table "run stale_page_table"
	before=$(settled_slab_kb)
	scenario bench "run bench"
	after=$(settled_slab_kb)
	# 100,000 lifecycles: a leaked sg table or context per lifecycle would
	# grow the slab by >= 3 MB; the 1 MB bound shrinks with the count
	# (about 10 bytes per lifecycle)
	limit=$((1024 / DIV))
	if [ $((after - before)) -lt $limit ]; then
		report no_slab_growth PASS "unreclaimable slab ${before} kB -> ${after} kB over the benchmark's $BENCH_N lifecycles (bound $limit kB)"
	else
		report no_slab_growth FAIL "unreclaimable slab grew ${before} kB -> ${after} kB over $BENCH_N lifecycles, bound $limit kB (leak per registration?)"
	fi

	# --- rmmod while a registration is alive -------------------------
	if ctl "hold 2"; then
		r=$(refcnt)
		if rmmod nv_peer_mem 2>/dev/null; then
			report rmmod_busy FAIL "rmmod nv_peer_mem succeeded with 2 registrations alive (refcount was $r)"
		elif [ "$r" != 2 ]; then
			ctl drop
			report rmmod_busy FAIL "refcount $r with 2 registrations alive, want 2 (one module reference per context)"
		elif [ "$(peer_file nv_mem version)" != "$(cat /sys/module/nv_peer_mem/version)" ]; then
			ctl drop
			report rmmod_busy FAIL "the refused rmmod took memory_peers/nv_mem/version away with 2 registrations alive"
		else
			ctl drop
			r=$(refcnt)
			if [ "$r" != 0 ]; then
				report rmmod_busy FAIL "refcount $r after releasing every registration, want 0"
			elif ! out=$(rmmod nv_peer_mem 2>&1); then
				report rmmod_busy FAIL "rmmod after release failed: $out"
			else
				report rmmod_busy PASS "rmmod refused with 2 registrations alive (refcount 2, memory_peers/nv_mem kept), succeeded after release"
			fi
		fi
	else
		report rmmod_busy FAIL "${RESULT#FAIL }"
	fi
	loaded && rmmod nv_peer_mem
	# What NCCL and UCX test for goes with the module.
	# -L too: a link whose target went reads as absent to -e (and to
	# NCCL) but would block the next load's own.
	left=
	for f in /sys/module/nv_peer_mem /sys/kernel/mm/memory_peers/nv_mem /sys/kernel/mm/memory_peers/nv_mem_nc; do
		[ -e $f ] && left="$left $f"
	done
	[ -L /sys/kernel/mm/memory_peers ] && left="$left /sys/kernel/mm/memory_peers (a link)"
	nccl_says 0 || left="$left ($NCCL_SAID)"
	if [ -n "$left" ]; then
		report memory_peers_unload FAIL "left after rmmod nv_peer_mem:$left"
	else
		report memory_peers_unload PASS "rmmod took /sys/module/nv_peer_mem and memory_peers/nv_mem, nv_mem_nc away; $NCCL_SAID"
	fi
	memory_peers_taken_check

	# --- a late free callback racing with rmmod ----------------------
	# acquire's probe unpin fails (nvidia.ko 535: -ENOMEM before RM): "not
	# mine", but the driver still holds the page table and will call the
	# module's probe callback when the memory is freed. rmmod must be
	# refused until that callback has come, else it calls into freed code.
	insmod "$KO" $BOTH_CLIENTS
	if ! ctl orphan; then
		report late_callback FAIL "${RESULT#FAIL }"
	elif rmmod nv_peer_mem 2>/dev/null; then
		report late_callback FAIL "rmmod succeeded while nvidia.ko still held a page table whose free callback is in nv_peer_mem; delivering it:"
		(ctl free_orphan)
	elif ! ctl free_orphan; then
		report late_callback FAIL "${RESULT#FAIL }"
	elif ! out=$(rmmod nv_peer_mem 2>&1); then
		report late_callback FAIL "rmmod after the late free callback failed: $out"
	else
		report late_callback PASS "rmmod refused while a free callback was due, succeeded after it came"
	fi
	loaded && rmmod nv_peer_mem

	scenario unregister "run register_none"
fi

# --- 200 load/unload cycles (200 / DIV) ----------------------------------
ctl snapshot
i=0
err=
while [ $i -lt $CYCLES ]; do
	# both clients: two registrations and unregistrations per cycle
	out=$(insmod "$KO" $BOTH_CLIENTS 2>&1) || { err="load $i: $out"; break; }
	out=$(rmmod nv_peer_mem 2>&1) || { err="unload $i: $out"; break; }
	i=$((i + 1))
done
if [ -n "$err" ]; then
	report load_cycles FAIL "$err"
	loaded && rmmod nv_peer_mem
else
	scenario load_cycles "cycles $CYCLES"
fi

# --- parameters ---------------------------------------------------------
# Defaults: the persistent client alone, as nv_mem (nvidia-peermem >= 560).
if out=$(insmod "$KO" 2>&1); then
	scenario persistent_default "run register_persistent"
	scenario nc_as_nv_mem "run nc_as_nv_mem"
	rmmod nv_peer_mem
else
	report persistent_default FAIL "insmod nv_peer_mem.ko (defaults): $out"
	report nc_as_nv_mem FAIL "insmod nv_peer_mem.ko (defaults): $out"
fi

# The same module built against an nv-p2p.h without the persistent API
# (the project's own ABI description): only the invalidating nv_mem.
if out=$(insmod "$KO_NO_PERSISTENT" 2>&1); then
	scenario no_persistent_api "run register_no_nc"
	rmmod nv_peer_mem
else
	report no_persistent_api FAIL "insmod of the module built without the persistent API: $out"
fi

if out=$(insmod "$KO" peerdirect_support=1 $BOTH_CLIENTS 2>&1); then
	scenario legacy "run register_legacy"
	scenario invalidate_legacy "run invalidate"
	rmmod nv_peer_mem
else
	report legacy FAIL "insmod peerdirect_support=1: $out"
	report invalidate_legacy FAIL "insmod peerdirect_support=1: $out"
fi

invalid_param peerdirect_support 2
invalid_param persistent_api_support 2

# --- second registration fails: the first one is rolled back -------------
ctl "fail_register 2"
if out=$(insmod "$KO" $BOTH_CLIENTS 2>&1); then
	rmmod nv_peer_mem
	ctl "fail_register 0"
	report register_rollback FAIL "insmod succeeded although the core refused the second client"
else
	scenario register_rollback "rollback"
fi

scenario final "run final"
rmmod nvpm_scenarios
memory_peers_reload_check
for m in $UNLOAD; do
	rmmod $m
done
