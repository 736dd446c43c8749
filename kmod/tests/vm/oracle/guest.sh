# Sourced by the guest's init (kmod/tests/vm/guest/init) after nv_peer_mem's
# own scenarios have all reported (NVPMTEST-SUMMARY and the dmesg dump are
# out), with the doubles unloaded. Runs, in the same boot:
#   1. the side-by-side benchmark: nv_peer_mem.ko and the benchmark's
#      reference client (nvidia-peermem), alternately, each loaded alone;
#   2. the differential oracle: the same scenarios against each other
#      client (nvidia-peermem 535/550/580/595, Mellanox nv_peer_mem 1.3),
#      loaded one at a time (they register the same client names), each
#      above the NVIDIA double of its own driver generation ($O/modules:
#      "<module> <generation>"; $O/double-<generation>.ko): a client built
#      against the other generation's nv-p2p.h cannot load beside a double
#      (the nvidia_p2p_* symbol CRCs differ), so the providers are swapped
#      between columns of different generations; the rest of a line is
#      the module's insmod parameters for the scenarios.
# Everything after NVPMTEST-ORACLE-BEGIN is information for the host's
# table (xtask/src/vm/oracle.rs), never part of nv_peer_mem's verdict. A
# scenario that hangs stops the oracle phase (its ctl write holds the
# scenario driver's lock for good); a crash ends the guest, after nv_peer_mem's
# results are already out. Output:
#   NVPMORACLE-RUN <module> <scenario>            (before each scenario)
#   NVPMORACLE <module> PASS|FAIL <scenario>: <detail>
#   NVPMORACLE-MODULE <module> FAIL: <why>         (could not load / unload)
#   NVPMBENCH <module> <case> <pages> <iterations> <total ns> <client>
#   NVPMORACLE-STOP <why>
O=$M/oracle
# Seconds one scenario may take before the oracle phase gives up on it: on
# an idle host ours take seconds each on TCG, but the race took 100 s on a
# loaded one; a deadlock never ends.
O_LIMIT=240
echo "NVPMTEST-ORACLE-BEGIN"

o_stop() {
	echo "NVPMORACLE-STOP $1"
	for m in nvpm_bench nvpm_scenarios mofed_peer_core nv_p2p_double; do
		rmmod $m 2>/dev/null
	done
	echo "NVPMTEST-END"
	poweroff -f
}

# o_ctl FILE "command": the write in the background, so that a scenario
# stuck in the kernel (a deadlock) is seen instead of hanging the guest;
# O_RESULT holds the result file's text.
o_ctl() {
	(echo "$2" >"$1/ctl") 2>/dev/null &
	pid=$!
	t=0
	while kill -0 $pid 2>/dev/null; do
		if [ $t -ge $O_LIMIT ]; then
			return 124
		fi
		sleep 1
		t=$((t + 1))
	done
	wait $pid
	rc=$?
	O_RESULT=$(cat "$1/result")
	return $rc
}

o_report() { # module PASS|FAIL scenario detail
	echo "NVPMORACLE $1 $2 $3: $4"
}

# o_scenario module modname name "command": one kernel scenario, plus the
# client's module refcount (0 once every context is released)
o_scenario() {
	echo "NVPMORACLE-RUN $1 $3"
	o_ctl /sys/kernel/debug/nvpm "$4"
	rc=$?
	if [ $rc = 124 ]; then
		o_report "$1" FAIL "$3" "did not finish within $O_LIMIT s (deadlock?)"
		o_stop "scenario $3 of $1 hung"
	elif [ $rc = 0 ]; then
		r=$(cat /sys/module/$2/refcnt 2>/dev/null || echo none)
		if [ "$r" != 0 ] && [ "$r" != none ]; then
			o_report "$1" FAIL "$3" "module refcount is $r after the scenario"
		else
			o_report "$1" PASS "$3" "${O_RESULT#PASS }"
		fi
	else
		# a failed scenario may have left a context behind: say so, so
		# that a later unload failure has its cause in the table
		r=$(cat /sys/module/$2/refcnt 2>/dev/null || echo none)
		case $r in
		0 | none) o_report "$1" FAIL "$3" "${O_RESULT#FAIL }" ;;
		*) o_report "$1" FAIL "$3" "${O_RESULT#FAIL } (module refcount $r after it)" ;;
		esac
	fi
}

# o_providers GENERATION: the NVIDIA double of that generation with the
# PeerDirect core and the scenario and benchmark drivers above it, loaded
# fresh unless they are loaded already.
o_gen=
o_providers() {
	[ "$o_gen" = "$1" ] && return 0
	for m in nvpm_bench nvpm_scenarios mofed_peer_core nv_p2p_double; do
		rmmod $m 2>/dev/null
	done
	o_gen=
	for ko in $O/double-$1.ko $M/mofed_peer_core.ko $M/nvpm_scenarios.ko $M/nvpm_bench.ko; do
		[ -f $ko ] || [ $ko = $O/double-$1.ko ] || continue
		if ! out=$(insmod $ko 2>&1); then
			o_stop "insmod $ko ($1-style driver): $out"
		fi
	done
	o_gen=$1
}
o_providers "$(cat $O/generation)"

# --- 1. benchmark ---------------------------------------------------------
# bench_case module ko case pages iterations [insmod parameters]
bench_case() {
	if ! out=$(insmod $2 $6 2>&1); then
		echo "NVPMORACLE-MODULE $1 FAIL: insmod for the benchmark: $out"
		return 1
	fi
	o_ctl /sys/kernel/debug/nvpm_bench "lifecycle $4 $5"
	rc=$?
	[ $rc = 124 ] && o_stop "benchmark $3 of $1 hung"
	if [ $rc = 0 ]; then
		echo "NVPMBENCH $1 $3 $O_RESULT"
	else
		echo "NVPMBENCH-FAIL $1 $3: $O_RESULT"
	fi
	rmmod "$(basename "$2" .ko)" || o_stop "rmmod after the benchmark of $1 failed"
}
# Only in the benchmark's own boot (BENCH_ONLY, set by the init), which
# ends after it.
if [ -n "$BENCH_ONLY" ] && [ -f $O/bench_reference ]; then
	ref=$(cat $O/bench_reference)
	# Alternating rounds, so that both see the same guest state; the host
	# keeps each module's fastest round. Like for like: ours with
	# persistent_api_support=0, so the core hands the memory to its
	# invalidating nv_mem, as it does to nvidia-peermem 550's (535/550
	# register nv_mem first and it claims all GPU memory, so their
	# persistent nv_mem_nc cannot be reached through the core).
	for round in 1 2 3 4 5; do
		for mod in nv_peer_mem "$ref"; do
			if [ $mod = nv_peer_mem ]; then
				ko=$M/nv_peer_mem.ko
				params=persistent_api_support=0
			else
				ko=$O/$mod.ko
				params=$(sed -n "s/^$mod [^ ]* *//p" $O/modules)
			fi
			bench_case "$mod" "$ko" small 2 2000 "$params"
			bench_case "$mod" "$ko" 1GiB 16384 4 "$params"
		done
	done
fi
if [ -n "$BENCH_ONLY" ]; then
	o_stop "benchmark boot: done"
fi

# --- 2. differential oracle -----------------------------------------------
# o_columns GENERATION: every client of that driver generation, first the
# main scenarios, then free_during_get and race (last: see below). The
# generations run one after the other, so a client that cannot be unloaded
# (which stops the phase) costs only the columns after it.
o_columns() {
	while read -r mod gen params; do
		[ "$gen" = "$1" ] || continue
		o_providers "$gen"
		if ! out=$(insmod $O/$mod.ko $params 2>&1); then
			echo "NVPMORACLE-MODULE $mod FAIL: insmod: $out"
			continue
		fi
		o_scenario $mod $mod register "run register"
		o_scenario $mod $mod acquire "run acquire"
		o_scenario $mod $mod lifecycle "run lifecycle"
		o_scenario $mod $mod several "run several"
		o_scenario $mod $mod dma_map_refusals "run dma_map_refusals"
		o_scenario $mod $mod page_table_version "run page_table_version"
		o_scenario $mod $mod invalidate "run invalidate"
		o_scenario $mod $mod nc "run nc"
		o_scenario $mod $mod inject "run inject"
		echo "NVPMORACLE-RUN $mod rmmod_busy"
		if o_ctl /sys/kernel/debug/nvpm "hold 2"; then
			if rmmod $mod 2>/dev/null; then
				o_report $mod FAIL rmmod_busy "rmmod succeeded with 2 registrations alive"
				o_ctl /sys/kernel/debug/nvpm drop
				insmod $O/$mod.ko $params
			else
				o_ctl /sys/kernel/debug/nvpm drop
				o_report $mod PASS rmmod_busy "rmmod refused with 2 registrations alive"
			fi
		else
			o_report $mod FAIL rmmod_busy "${O_RESULT#FAIL }"
		fi
		if ! out=$(rmmod $mod 2>&1); then
			echo "NVPMORACLE-MODULE $mod FAIL: rmmod: $out (refcount $(cat /sys/module/$mod/refcnt))"
			o_stop "$mod could not be unloaded: the next client would register beside it"
		fi
		o_scenario $mod $mod unregister "run register_none"
		if out=$(insmod $O/$mod.ko $params peerdirect_support=1 2>&1); then
			o_scenario $mod $mod legacy "run register_legacy"
			o_scenario $mod $mod invalidate_legacy "run invalidate"
			rmmod $mod || o_stop "$mod (peerdirect_support=1) could not be unloaded"
		else
			o_report $mod FAIL legacy "insmod peerdirect_support=1: $out"
			o_report $mod FAIL invalidate_legacy "insmod peerdirect_support=1: $out"
		fi
		if out=$(insmod $O/$mod.ko $params peerdirect_support=2 2>&1); then
			rmmod $mod
			o_report $mod FAIL peerdirect_invalid "insmod peerdirect_support=2 succeeded"
		else
			o_report $mod PASS peerdirect_invalid "insmod peerdirect_support=2: $out"
		fi
	done <$O/modules
	# free_during_get and race last, for every client: one that invalidates from
	# the free callback while the core holds its mapping lock deadlocks in the
	# first (a hang ends the oracle phase), and a use-after-free in the race
	# corrupts memory that later scenarios would be charged for.
	while read -r mod gen params; do
		[ "$gen" = "$1" ] || continue
		o_providers "$gen"
		if out=$(insmod $O/$mod.ko $params 2>&1); then
			o_scenario $mod $mod free_during_get "run free_during_get"
			o_scenario $mod $mod race "run race"
			rmmod $mod || o_stop "$mod could not be unloaded after free_during_get and race"
		fi
	done <$O/modules
}
for g in $(cut -d' ' -f2 $O/modules | uniq); do
	o_columns "$g"
done
o_stop "done"
