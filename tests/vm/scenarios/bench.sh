# Benchmark (not a test): per-switch overhead of scx_gang against classic
# signal-based gang switching, side by side in one boot, the way seed 000
# Table 4 does it:
#
#   T_elapsed = TQ / (TQ - T_overhead) * MPL * T_process
#
# measured as throughput, so that no job's start or end is in the figure:
# one CPU-bound gang alone does U_alone work units in a window of D seconds;
# two identical gangs (MPL 2) switched every TQ ms, busy over the same kind of
# window, do U_a + U_b. Then MPL * T_process / T_elapsed = (U_a + U_b) / U_alone = r and
#
#   T_overhead = TQ * (1 - r)        (time lost per switch)
#
# The signal-based methods are compared with U_alone on the default scheduler,
# scx_gang with U_alone under scx_gang (its cost with no switch at all is
# printed apart). Each repetition measures its own U_alone right before its
# pairs; the table gives medians over repetitions.
#
# BENCH_MODE=overhead (default): the table above, in $RESULTS/bench.txt.
# BENCH_MODE=latency: scx_gang's switch latency and overlap at each TQ with
# two gangs on every vCPU, in $RESULTS/latency.txt.
. /scenarios/lib.sh

MODE=${BENCH_MODE:-overhead}
SECONDS_EACH=${BENCH_SECONDS:-4}  # D: length of every run
SLOTS=${BENCH_SLOTS:-"10 50 200"}
REPS=${BENCH_REPS:-5}
THREADS=$(grep -c ^processor /proc/cpuinfo)   # one per vCPU: gangs fill the node
OUT=$RESULTS/bench.jsonl

field() { sed -n "s/.*\"$2\":\\([0-9.]*\\).*/\\1/p" "$1"; }

# window: a CLOCK_MONOTONIC window of D seconds starting shortly, so that
# every burn of a run counts work over exactly the same time.
window() { awk -v d="$SECONDS_EACH" '{ printf "%.3f %.3f\n", $1 + 0.3, $1 + 0.3 + d }' /proc/uptime; }

# run_pair: two gangs busy over the same window (SWITCHER, if set, switches
# them); prints the work units they did together.
run_pair() {
	w=$(window)
	in_gang a burn --window $w --threads "$THREADS" --name a > /tmp/a.json; A=$!
	in_gang b burn --window $w --threads "$THREADS" --name b > /tmp/b.json; B=$!
	[ -n "$SWITCHER" ] && { $SWITCHER > /tmp/switcher.json & SW=$!; }
	wait $A $B
	[ -n "$SWITCHER" ] && { kill -TERM $SW; wait $SW; }
	echo $(( $(field /tmp/a.json units) + $(field /tmp/b.json units) ))
}

alone() {
	in_gang a burn --window $(window) --threads "$THREADS" --name a > /tmp/a.json; wait $!
	field /tmp/a.json units
}

record() { # rep method tq units
	echo "{\"rep\":$1,\"method\":\"$2\",\"slot_ms\":$3,\"units\":$4}" >> "$OUT"
}

latency() {
	for tq in $SLOTS; do
		start_scx_gang --slot-ms "$tq"
		busy_gang a 7 "$THREADS"; A=$LAST_GANG_PID
		busy_gang b 7 "$THREADS"; B=$LAST_GANG_PID
		wait_gangs 2
		sleep 1
		scx_gang trace --seconds 5 --json "$RESULTS/trace_$tq.json" --svg "$RESULTS/trace_$tq.svg" > "$RESULTS/trace_$tq.out" 2>&1
		wait $A $B
		stop_scx_gang
		flat=$(tr -d ' \n' < "$RESULTS/trace_$tq.out")
		lat=$(echo "$flat" | sed -n 's/.*"switch_latency_us":{"p50":\([0-9.]*\),"p99":\([0-9.]*\),"max":\([0-9.]*\).*/p50 \1 us, p99 \2 us, max \3 us/p')
		ovl=$(echo "$flat" | sed -n 's/.*"overlap_fraction":\([0-9.e-]*\).*/\1/p')
		echo "$THREADS vCPU, TQ=$tq ms: switch latency $lat; overlap fraction $ovl" >> "$RESULTS/latency.txt"
	done
	cat "$RESULTS/latency.txt"
}

if [ "$MODE" = latency ]; then
	latency
	exit 0
fi

: > "$OUT"
alone > /dev/null
for rep in $(seq $REPS); do
	record "$rep" alone 0 "$(alone)"
	for tq in $SLOTS; do
		for method in sigstop freezer; do
			flag=""; [ $method = freezer ] && flag=--freezer
			SWITCHER="sigswitch --slot-ms $tq $flag $GANG_ROOT/a $GANG_ROOT/b"
			record "$rep" $method "$tq" "$(run_pair)"
		done
	done
	SWITCHER=""
	start_scx_gang
	record "$rep" scx_alone 0 "$(alone)"
	for tq in $SLOTS; do
		echo "$tq" > $KNOBS/slot_ms || fail "slot_ms $tq refused"
		sleep 0.2   # the new length applies from the next slot boundary
		record "$rep" scx_gang "$tq" "$(run_pair)"
	done
	stop_scx_gang
	log "repetition $rep of $REPS done"
done

# Per repetition: r and T_overhead against that repetition's own U_alone;
# then the median over repetitions for each (method, TQ).
awk -v reps="$REPS" -v d="$SECONDS_EACH" '
	function field(name,   v) { v = $0; sub(".*\"" name "\":\"?", "", v); sub("[\",}].*", "", v); return v }
	function median(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{
		rep = field("rep"); m = field("method"); tq = field("slot_ms"); u = field("units")
		if (m == "alone") { ua[rep] = u; alone = alone " " u; next }
		if (m == "scx_alone") { us[rep] = u; scx_alone = scx_alone " " u / ua[rep]; next }
		if (!(tq in seen)) { seen[tq] = 1; tqs[++ntq] = tq }
		key = m " " tq
		base = (m == "scx_gang") ? us[rep] : ua[rep]
		r[key] = r[key] " " u / base
		ov[key] = ov[key] " " tq * (1 - u / base)
	}
	END {
		printf "one gang alone, default scheduler: median %d work units in %s s (%d repetitions)\n", median(alone), d, reps
		printf "one gang alone under scx_gang (no switch): %.4f of that\n", median(scx_alone)
		printf "%-9s %7s %22s %21s\n", "method", "TQ(ms)", "r=(U_a+U_b)/U_alone", "overhead/switch(us)"
		split("scx_gang sigstop freezer", ms, " ")
		for (i = 1; i <= ntq; i++) for (j = 1; j <= 3; j++) {
			key = ms[j] " " tqs[i]
			o[key] = median(ov[key])
			printf "%-9s %7d %22.4f %21.1f\n", ms[j], tqs[i], median(r[key]), o[key] * 1000
		}
		for (i = 1; i <= ntq; i++) {
			g = o["scx_gang " tqs[i]]; s = o["sigstop " tqs[i]]; f = o["freezer " tqs[i]]
			if (g > 0)
				printf "TQ=%d ms: overhead per switch sigstop/scx_gang %.1fx, freezer/scx_gang %.1fx\n", tqs[i], s / g, f / g
			else
				printf "TQ=%d ms: scx_gang overhead per switch %.1f us (none measurable); sigstop %.1f us, freezer %.1f us\n", tqs[i], g * 1000, s * 1000, f * 1000
		}
	}' "$OUT" > "$RESULTS/bench.txt"
cat "$RESULTS/bench.txt"
exit 0
