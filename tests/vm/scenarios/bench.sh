# Benchmark (not a test): per-switch overhead of scx_gang against classic
# signal-based gang switching, measured side by side in one boot, the way
# seed 000 Table 4 does it:
#
#   T_elapsed = TQ / (TQ - T_overhead) * MPL * T_process
#   =>  T_overhead = TQ * (1 - MPL * T_process / T_elapsed)
#
# T_process: one gang's fixed CPU-bound work, alone, on the default scheduler.
# T_elapsed: the same gang's time when two identical gangs (MPL 2) share the
# node in slots of TQ ms. Also: scx_gang's switch latency from its trace.
# Output: $RESULTS/bench.jsonl (one line per run) and $RESULTS/bench.txt.
. /scenarios/lib.sh

WORK=${BENCH_WORK:-1500}          # work units per thread (about 2 s here)
SLOTS=${BENCH_SLOTS:-"10 50 200"}
REPS=${BENCH_REPS:-2}
OUT=$RESULTS/bench.jsonl
: > "$OUT"

elapsed() { sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$1"; }

# run_pair TAG: two gangs of WORK, started together; prints both elapsed.
run_pair() {
	in_gang a burn --work "$WORK" --threads 2 --name a > /tmp/a.json; A=$!
	in_gang b burn --work "$WORK" --threads 2 --name b > /tmp/b.json; B=$!
	[ -n "$SWITCHER" ] && { $SWITCHER > /tmp/switcher.json & SW=$!; }
	wait $A $B
	[ -n "$SWITCHER" ] && { kill -TERM $SW; wait $SW; }
	echo "$(elapsed /tmp/a.json) $(elapsed /tmp/b.json)"
}

record() { # method tq rep ta tb
	echo "{\"method\":\"$1\",\"slot_ms\":$2,\"rep\":$3,\"elapsed_a\":$4,\"elapsed_b\":$5}" >> "$OUT"
}

log "T_process: one gang alone on the default scheduler"
for rep in $(seq $REPS); do
	in_gang a burn --work "$WORK" --threads 2 --name a > /tmp/a.json; wait $!
	t=$(elapsed /tmp/a.json); record alone 0 "$rep" "$t" "$t"
done

for tq in $SLOTS; do
	for rep in $(seq $REPS); do
		for method in sigstop freezer; do
			flag=""; [ $method = freezer ] && flag=--freezer
			SWITCHER="sigswitch --slot-ms $tq $flag $GANG_ROOT/a $GANG_ROOT/b"
			set -- $(run_pair); record $method "$tq" "$rep" "$1" "$2"
			log "$method TQ=$tq rep $rep: $1 s, $2 s"
		done
	done
done
SWITCHER=""

for tq in $SLOTS; do
	start_scx_gang --slot-ms "$tq"
	if [ "$tq" = "${SLOTS%% *}" ]; then
		log "one gang alone under scx_gang (one slot, no switches)"
		in_gang a burn --work "$WORK" --threads 2 --name a > /tmp/a.json; wait $!
		t=$(elapsed /tmp/a.json); record scx_alone 0 1 "$t" "$t"
	fi
	for rep in $(seq $REPS); do
		set -- $(run_pair); record scx_gang "$tq" "$rep" "$1" "$2"
		log "scx_gang TQ=$tq rep $rep: $1 s, $2 s"
	done
	# Switch latency with the two gangs running.
	in_gang a burn --seconds 6 --threads 2 --name a > /dev/null; A=$!
	in_gang b burn --seconds 6 --threads 2 --name b > /dev/null; B=$!
	wait_gangs 2
	scx_gang trace --seconds 4 --json "$RESULTS/trace_$tq.json" --svg "$RESULTS/trace_$tq.svg" > "$RESULTS/trace_$tq.out" 2>&1
	wait $A $B
	stop_scx_gang
	mv "$RESULTS/scx_gang.log" "$RESULTS/scx_gang_$tq.log"
done

# The table: mean elapsed of both gangs per (method, TQ), overhead per switch.
awk -v mpl=2 '
	{
		m = $0; sub(/.*"method":"/, "", m); sub(/".*/, "", m)
		tq = $0; sub(/.*"slot_ms":/, "", tq); sub(/,.*/, "", tq)
		a = $0; sub(/.*"elapsed_a":/, "", a); sub(/,.*/, "", a)
		b = $0; sub(/.*"elapsed_b":/, "", b); sub(/}.*/, "", b)
		if (m == "alone") { alone += a; nalone++; next }
		if (m == "scx_alone") { scx_alone = a; next }
		key = m " " tq; sum[key] += (a + b) / 2; n[key]++
		if (!(tq in seen)) { seen[tq] = 1; tqs[++ntq] = tq }
	}
	END {
		tp = alone / nalone
		printf "T_process (alone, default scheduler): %.3f s\n", tp
		if (scx_alone) printf "one gang alone under scx_gang: %.3f s (%.2f %% vs default)\n", scx_alone, (scx_alone / tp - 1) * 100
		printf "%-9s %7s %11s %13s %14s\n", "method", "TQ(ms)", "T_elapsed", "slowdown/MPL", "overhead(ms)"
		split("scx_gang sigstop freezer", ms, " ")
		for (i = 1; i <= ntq; i++) for (j = 1; j <= 3; j++) {
			key = ms[j] " " tqs[i]; if (!n[key]) continue
			te = sum[key] / n[key]; ov[key] = tqs[i] * (1 - mpl * tp / te)
			printf "%-9s %7d %10.3fs %13.3f %14.3f\n", ms[j], tqs[i], te, te / (mpl * tp), ov[key]
		}
		for (i = 1; i <= ntq; i++) {
			g = ov["scx_gang " tqs[i]]; s = ov["sigstop " tqs[i]]; f = ov["freezer " tqs[i]]
			printf "TQ=%d ms: overhead sigstop/scx_gang = %s, freezer/scx_gang = %s\n", tqs[i],
				(g > 0 ? sprintf("%.1fx", s / g) : "n/a (scx_gang overhead <= 0)"),
				(g > 0 ? sprintf("%.1fx", f / g) : "n/a")
		}
	}' "$OUT" > "$RESULTS/bench.txt"

for tq in $SLOTS; do
	flat=$(tr -d ' \n' < "$RESULTS/trace_$tq.out")
	lat=$(echo "$flat" | sed -n 's/.*"switch_latency_us":{"p50":\([0-9.]*\),"p99":\([0-9.]*\),"max":\([0-9.]*\).*/p50 \1 us, p99 \2 us, max \3 us/p')
	ovl=$(echo "$flat" | sed -n 's/.*"overlap_fraction":\([0-9.e-]*\).*/\1/p')
	echo "scx_gang TQ=$tq ms: switch latency $lat; overlap fraction $ovl"
done >> "$RESULTS/bench.txt"
cat "$RESULTS/bench.txt"
exit 0
