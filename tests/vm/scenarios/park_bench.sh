# Where a park's time goes (issue 12): `scx_gang park-bench` on a CPU-bound
# gang, first under the kernel's own scheduler, then under scx_gang (two
# gangs rotating in standalone mode, 100 ms slots), then on a gang with a
# TCP socket. Not a test: scripts/bench_park.sh boots it and prints the
# tables (eevdf.txt, gang.txt, socket.txt).
. /scenarios/lib.sh

ROUNDS=${PARK_ROUNDS:-40}
mkdir -p "$GANG_ROOT"
busy_gang a 120 1; A=$LAST_GANG_PID
busy_gang b 120 1; B=$LAST_GANG_PID
sleep 1
scx_gang park-bench "$GANG_ROOT/a" --rounds "$ROUNDS" > "$RESULTS/eevdf.txt" 2>&1 || fail "park-bench (eevdf): $(cat "$RESULTS/eevdf.txt")"

start_scx_gang
wait_gangs 2
scx_gang park-bench "$GANG_ROOT/a" --rounds "$ROUNDS" > "$RESULTS/gang.txt" 2>&1 || fail "park-bench (scx_gang): $(cat "$RESULTS/gang.txt")"

# A gang with a socket: nc listening in it.
in_gang c nc -ll -p 5001 -e /bin/cat > /dev/null; C=$!
wait_for 10 sh -c 'netstat -ltn | grep -q ":5001 "' || fail "no listener"
nc 127.0.0.1 5001 < /dev/zero > /dev/null & N=$!
sleep 1
scx_gang park-bench "$GANG_ROOT/c" --rounds "$ROUNDS" > "$RESULTS/socket.txt" 2>&1 || fail "park-bench (socket): $(cat "$RESULTS/socket.txt")"
kill $N $C $A $B 2>/dev/null
wait $N $C $A $B 2>/dev/null
stop_scx_gang
exit 0
