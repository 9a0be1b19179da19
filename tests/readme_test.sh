#!/bin/sh
# The README's example program (build/readme_example, extracted from README.md by make) as server and
# client on one device: both must exit 0 within the timeout (a completion that never comes is a hang,
# caught by the timeout), and the server must print what the client's put wrote.
cd "$(dirname "$0")/.." || exit 1
B=${RDMAX_BUILD:-build}
out=build/test-results/readme; mkdir -p "$out"
ex=$B/readme_example
export RDMAX_DEVICE=${RDMAX_TEST_DEV0:-${RDMAX_DEVICE:-}}
[ -n "$RDMAX_DEVICE" ] || unset RDMAX_DEVICE
slog=$out/server.log; clog=$out/client.log
rm -f "$slog" "$clog"
timeout 60 "$ex" >"$slog" 2>&1 &
spid=$!
i=0
while [ $i -lt 300 ] && ! grep -q listening "$slog" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
timeout 30 "$ex" "${RDMAX_TEST_ADDR0:-127.0.0.1}" >"$clog" 2>&1
crc=$?
wait $spid
src=$?
if [ $crc = 0 ] && [ $src = 0 ] && grep -q '^the client wrote: hello$' "$slog" && grep -q '^put and send done$' "$clog"; then
    echo "PASS readme/example: put with a comp and mem NULL completes; server sees the data"
else
    echo "FAIL readme/example: client exit $crc, server exit $src (124: timed out)"
    tail -3 "$clog" | sed 's/^/    client: /'
    tail -3 "$slog" | sed 's/^/    server: /'
    exit 1
fi
