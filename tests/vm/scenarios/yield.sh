# Voluntary yield (issue 4) on one node, standalone rotation, slot_ms=50,
# yield_lead_us=10000 (a loaded host stretches an iteration of the emulated
# ranks to milliseconds: a short lead would miss it):
# gang a's two ranks call yield_point() at every iteration, gang b's two never
# do. Then a ring of two ranks waits with wait_readable under each policy
# while a CPU-bound gang competes for the slots.
. /scenarios/lib.sh

start_scx_gang --slot-ms 50 --yield-lead-us 10000
for i in 0 1; do
	in_gang a burn --seconds 16 --threads 1 --yield-every 1 --name a$i > "$RESULTS/a$i.json"
	eval A$i=\$!
	in_gang b burn --seconds 16 --threads 1 --name b$i > "$RESULTS/b$i.json"
	eval B$i=\$!
done
wait_gangs 2
sleep 2
in_gang a slotclock --samples 20 --interval-ms 7 > "$RESULTS/clock_a.json" 2>&1
wait $!
slotclock > "$RESULTS/clock_none.json" 2>&1
echo $? > "$RESULTS/clock_none.rc"
cat $KNOBS/gangs > "$RESULTS/gangs_before"
scx_gang trace --seconds 8 --json "$RESULTS/trace.json" > "$RESULTS/trace.out" 2>&1 \
	|| fail "trace failed: $(cat $RESULTS/trace.out)"
cat $KNOBS/gangs > "$RESULTS/gangs_after"
wait $A0 $A1 $B0 $B1
log "yield part done: $(cat $RESULTS/gangs_after | tr '\n' ';')"

port=7100
for policy in block spin:200 adaptive inslot:200; do
	name=${policy%%:*}
	in_gang busy burn --seconds 60 --threads 2 --name busy > /dev/null
	BUSY=$!
	port=$((port + 2))
	peers=127.0.0.1:$port,127.0.0.1:$((port + 1))
	for r in 0 1; do
		in_gang ring env GANG_RANK=$r GANG_SIZE=2 GANG_PEERS=$peers \
			ring --rounds 300 --bytes 4096 --wait $policy --timeout 60 \
			> "$RESULTS/ring_${name}_$r.json" 2> "$RESULTS/ring_${name}_$r.err"
		eval R$r=\$!
	done
	wait $R0; echo $? > "$RESULTS/ring_${name}_0.rc"
	wait $R1; echo $? > "$RESULTS/ring_${name}_1.rc"
	kill $BUSY; wait $BUSY
	log "ring with --wait $policy: rc $(cat $RESULTS/ring_${name}_0.rc) $(cat $RESULTS/ring_${name}_1.rc)"
done
cat $KNOBS/gangs > "$RESULTS/gangs_end"
stop_scx_gang
exit 0
